"""What the local API accepts and how it refuses, in OpenAI's terms.

Requests are checked by one pydantic model, so a new field is one line there, and a bad value comes
back as a 400 that names it. Every refusal, from a bad field to a failed engine, is an ``ApiError``
and goes out in OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    model_validator,
)

from app.core.chat.conversation import Message
from app.core.chat.images import ImagePart, ImageRefused, TextWithImages, image_from_url, text_only_reason, with_images
from app.core.settings.settings import MAX_THINK_BUDGET, THINK_BUDGET_LEVELS, RequestControls, SamplingConfig
from app.engine.errors import EngineFailure, FailureKind

MAX_MESSAGES = 4_096  # more is never needed: the context holds a few hundred turns at most
MAX_TOTAL_CHARS = 1_000_000  # every field a client writes counts: texts, arguments, thinking, tools, schema, stops
MAX_SCHEMA_CHARS = 100_000  # a response_format schema, as JSON: xgrammar compiles it on the engine's loop
MAX_TOOLS_CHARS = 200_000  # the tools, as JSON: a forced call compiles them into a schema too
MAX_STOPS = 16
MAX_STOP_CHARS = 1_000  # each stop string is looked for in the text after every token
MAX_JSON_DEPTH = 64  # deeper JSON (schemas, parameters) only serves to exhaust a recursive parser
MAX_TOKENS = 131_072  # SamplingConfig's own bound
MAX_BODY_BYTES = 4 * 1024 * 1024

INVALID_REQUEST = "invalid_request_error"
SERVER_ERROR = "server_error"


class ApiError(Exception):
    """A refusal with its HTTP status, in OpenAI's terms: ``param`` names the field, ``code`` says why."""

    def __init__(self, status: int, message: str, *, kind: str = INVALID_REQUEST, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code

    def payload(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def _text(value: Any) -> str | TextWithImages:
    """Message content as one string: OpenAI allows a string, null, or a list of parts. Text parts are
    joined; image_url parts (data: URLs only) are read into TextWithImages, for a vision model (the server
    refuses them for any other); any other part (audio, a file) is refused."""
    if value is None:
        return ""
    images: tuple[ImagePart, ...] = ()
    if isinstance(value, list):
        if not all(isinstance(part, dict) for part in value):
            raise ValueError("content parts must be objects such as {\"type\": \"text\", \"text\": \"…\"}")
        others = sorted({str(part.get("type")) for part in value
                         if part.get("type", "text") not in ("text", "image_url")})
        if others:
            raise ValueError(f"only text and image_url parts are supported, not {', '.join(others)}")
        try:
            images = tuple(image_from_url(_url(part.get("image_url"))) for part in value
                           if part.get("type") == "image_url")
        except ImageRefused as exc:
            raise ValueError(f"image_url: {exc.problem}") from None
        texts = [part.get("text") for part in value if part.get("type", "text") == "text"]
        if not all(isinstance(text, str) for text in texts):
            raise ValueError("a text part needs a string 'text'")
        value = "".join(texts)  # type: ignore[arg-type]
    if not isinstance(value, str):
        raise ValueError("content must be a string or a list of content parts")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"character {exc.start} is a lone surrogate; send valid UTF-8 or paired \\u escapes") from None
    return TextWithImages(value, images) if images else value


def _url(image_url: object) -> str:
    """An image_url part's URL: OpenAI's {"url": ...} (its "detail" is ignored), or the URL alone."""
    return str((image_url.get("url") if isinstance(image_url, dict) else image_url) or "")


FiniteFloat = Annotated[float, AllowInfNan(False)]
Count = Annotated[int, Field(strict=True, ge=1, le=MAX_TOKENS)]
Penalty = Annotated[float, AllowInfNan(False), Field(ge=-2.0, le=2.0)]
UNLIMITED = -1  # vLLM's thinking_token_budget for "no budget"
ThinkingTokenBudget = Annotated[int, Field(strict=True, ge=UNLIMITED, le=MAX_THINK_BUDGET)]
# OpenAI's efforts: each maps onto a budget, and gpt-oss's template takes low/medium/high itself; "none" turns
# thinking off. vLLM's others (minimal, xhigh, max) have nothing of ours to map to, so they are refused by name
# rather than silently rounded.
ApiReasoningEffort = Literal["none", "low", "medium", "high"]
Text = Annotated[str | TextWithImages, BeforeValidator(_text)]


class Lenient(BaseModel):
    """Parts of messages: fields clients echo back (refusal, annotations…) are ignored."""

    model_config = ConfigDict(extra="ignore")


class FunctionCall(Lenient):
    name: str = Field(min_length=1, max_length=256)
    arguments: str = "{}"


class AssistantToolCall(Lenient):
    id: str = Field(min_length=1, max_length=256)
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text = ""
    name: str | None = None
    tool_calls: list[AssistantToolCall] | None = None  # an assistant's calls
    tool_call_id: str | None = None  # a tool message: the call it answers
    reasoning: str | None = None  # an assistant's thinking, under vLLM's name…
    reasoning_content: str | None = None  # …or DeepSeek's; both are accepted

    @model_validator(mode="after")
    def _shape(self) -> ChatMessage:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        return self

    def as_message(self) -> Message:
        """The message as chat templates take it (OpenAI's shape; developer is the system role)."""
        content = self.content
        message: Message = {"role": "system" if self.role == "developer" else self.role,
                            "content": with_images(content.text, content.images)
                            if isinstance(content, TextWithImages) else content}
        if self.name:
            message["name"] = self.name
        if self.tool_calls:
            message["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        if self.tool_call_id:
            message["tool_call_id"] = self.tool_call_id
        if thinking := self.reasoning_content or self.reasoning:
            message["reasoning_content"] = thinking  # the name Qwen3's and DeepSeek's templates read
        return message


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: FunctionSpec


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "answer"
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: StrictBool | None = None


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _needs_schema(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs a 'json_schema' object with a 'schema'")
        return self


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: StrictBool = False


class ChatTemplateKwargs(BaseModel):
    """vLLM's server takes the Think switch here; other template keywords are ignored."""

    model_config = ConfigDict(extra="ignore")

    enable_thinking: StrictBool | None = None


class ChatRequest(BaseModel):
    """The fields of /v1/chat/completions this server supports. Any other field is refused with a 400
    naming it (extra="forbid"): a client must not believe a setting took effect when it didn't."""

    model_config = ConfigDict(extra="forbid")

    messages: list[ChatMessage]
    model: str | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    temperature: FiniteFloat | None = Field(None, ge=0.0, le=2.0)
    top_p: FiniteFloat | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, strict=True, ge=-1, le=1000)  # -1 and 0: off, as in vLLM
    max_tokens: Count | None = None
    max_completion_tokens: Count | None = None
    chat_template_kwargs: ChatTemplateKwargs | None = None
    tools: list[ToolSpec] | None = Field(None, max_length=128)
    tool_choice: Literal["auto", "none", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    stop: str | list[str] | None = None
    response_format: ResponseFormat | None = None
    seed: int | None = Field(None, strict=True, ge=0, lt=2**63)
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    n: Literal[1] | None = None  # one choice per request: more are refused
    thinking_token_budget: ThinkingTokenBudget | None = None  # vLLM's field: tokens, or -1 for unlimited
    reasoning_effort: ApiReasoningEffort | None = None

    def chat_messages(self) -> list[Message]:
        return [m.as_message() for m in self.messages]

    def check_images(self, reads_images: bool, model: str) -> None:
        """A 400 naming the first message with images when the loaded model reads text only."""
        if reads_images:
            return
        for index, message in enumerate(self.messages):
            if isinstance(message.content, TextWithImages):
                raise ApiError(400, f"'messages[{index}].content' holds image_url parts, and "
                                    f"{text_only_reason(model)}", param=f"messages[{index}].content",
                               code="images_not_supported")

    def tool_list(self) -> list[dict[str, Any]] | None:
        return [tool.model_dump(exclude_none=True) for tool in self.tools] if self.tools else None

    def tool_choice_value(self) -> str | dict[str, Any] | None:
        choice = self.tool_choice
        return choice.model_dump() if isinstance(choice, NamedToolChoice) else choice

    def sampling(self, defaults: SamplingConfig) -> SamplingConfig:
        update: dict[str, Any] = {}
        if self.temperature is not None:
            update["temperature"] = self.temperature
        if self.top_p is not None:
            update["top_p"] = self.top_p
        if self.top_k is not None:
            update["top_k"] = max(0, self.top_k)
        if self.chat_template_kwargs is not None and self.chat_template_kwargs.enable_thinking is not None:
            update["thinking"] = self.chat_template_kwargs.enable_thinking  # the Think switch, per request
        asked = self.asked_think_budget()
        if self.reasoning_effort == "none":
            update["thinking"] = False
        elif self.reasoning_effort is not None:
            update["reasoning_effort"] = self.reasoning_effort  # Harmony's own "Reasoning: …" line
        if asked is not None:
            update["think_budget"] = asked
        limit = self.max_completion_tokens or self.max_tokens
        if limit is not None:
            # Their limit covers thinking and answer together. A budget they asked for may take all but the
            # answer's last token, as in vLLM; without one, split the limit the way our default budget does.
            think = min(asked, limit - 1) if asked is not None else min(defaults.think_budget, limit // 2)
            update["think_budget"], update["max_tokens"] = think, max(1, limit - think)
        update["request"] = self.controls().model_dump()
        return SamplingConfig.model_validate({**defaults.model_dump(), **update})

    def asked_think_budget(self) -> int | None:
        """The think budget the request asks for: ``thinking_token_budget`` (vLLM's field) wins over a
        ``reasoning_effort`` level, as vLLM applies the budget whatever the effort; None: the default's."""
        if self.thinking_token_budget is not None:
            return MAX_THINK_BUDGET if self.thinking_token_budget == UNLIMITED else self.thinking_token_budget
        if self.reasoning_effort is None:
            return None
        return THINK_BUDGET_LEVELS.get(self.reasoning_effort, 0)

    def controls(self) -> RequestControls:
        form = self.response_format
        schema = form.json_schema.schema_ if form is not None and form.type == "json_schema" and form.json_schema \
            else None
        return RequestControls(
            stop=tuple([self.stop] if isinstance(self.stop, str) else self.stop or ()), seed=self.seed,
            presence_penalty=self.presence_penalty or 0.0, frequency_penalty=self.frequency_penalty or 0.0,
            json_schema=json.dumps(schema) if schema is not None else None,
            json_object=form is not None and form.type == "json_object")


def parse_json(raw: bytes, charset: str | None) -> Any:
    if charset and charset.lower() not in ("utf-8", "utf8"):
        raise ApiError(400, f"The body's charset {charset[:40]!r} is not supported: send the JSON as UTF-8.",
                       code="unsupported_charset")
    try:
        return json.loads(raw)
    except RecursionError:
        raise ApiError(400, "The JSON body is nested too deeply.", code="invalid_json") from None
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not UTF-8
        raise ApiError(400, f"The body is not valid JSON: {str(exc)[:200]}.", code="invalid_json") from None


def json_depth(value: Any) -> int:
    """How deep JSON nests (a scalar is 0), without recursion: the value may be built to exhaust it."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_chat_request(body: Any) -> ChatRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "The body must be a JSON object.", code="invalid_json")
    if json_depth(body) > MAX_JSON_DEPTH:
        raise ApiError(400, f"The JSON body nests more than {MAX_JSON_DEPTH} levels deep; flatten it (schemas and "
                            "parameters included).", code="invalid_json")
    try:
        request = ChatRequest.model_validate(body)
    except ValidationError as exc:
        raise _validation_error(exc) from None
    if not request.messages:
        raise ApiError(400, "'messages' must be a non-empty list.", param="messages", code="invalid_value")
    if len(request.messages) > MAX_MESSAGES:
        raise ApiError(400, f"'messages' has {len(request.messages):,} messages; this server takes at most "
                            f"{MAX_MESSAGES:,}. Send the recent ones (older turns would not fit the context).",
                       param="messages", code="too_many_messages")
    _check_tools_and_stops(request)
    tools = len(json.dumps(request.tool_list())) if request.tools else 0
    if tools > MAX_TOOLS_CHARS:
        raise ApiError(400, f"'tools' is {tools:,} characters of JSON; this server takes at most "
                            f"{MAX_TOOLS_CHARS:,}. Offer fewer tools, or shorter descriptions.",
                       param="tools", code="tools_too_long")
    schema = request.controls().json_schema or ""
    if len(schema) > MAX_SCHEMA_CHARS:
        raise ApiError(400, f"'response_format' holds a schema of {len(schema):,} characters; this server takes "
                            f"at most {MAX_SCHEMA_CHARS:,}. Simplify the schema.",
                       param="response_format", code="schema_too_long")
    total = sum(_message_chars(m) for m in request.messages) + tools + len(schema) + sum(map(len, _stops(request)))
    if total > MAX_TOTAL_CHARS:
        raise ApiError(400, f"The request holds {total:,} characters (messages, tool calls, thinking, tools, schema "
                            f"and stops together); this server takes at most {MAX_TOTAL_CHARS:,}. Send the recent "
                            "turns only.", param="messages", code="messages_too_long")
    return request


def _message_chars(message: ChatMessage) -> int:
    """Every text a message carries, not its content alone: arguments and thinking reach the template too."""
    calls = sum(len(call.id) + len(call.function.name) + len(call.function.arguments)
                for call in message.tool_calls or ())
    text = message.content.text if isinstance(message.content, TextWithImages) else message.content
    return (len(text) + len(message.name or "") + len(message.tool_call_id or "") + calls
            + len(message.reasoning or "") + len(message.reasoning_content or ""))


def _stops(request: ChatRequest) -> list[str]:
    return [request.stop] if isinstance(request.stop, str) else request.stop or []


def _check_tools_and_stops(request: ChatRequest) -> None:
    names = [tool.function.name for tool in request.tools or ()]
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        raise ApiError(400, f"Invalid 'tool_choice': it names '{choice.function.name[:64]}', which is not among "
                            "'tools'.", param="tool_choice", code="invalid_value")
    if choice == "required" and not names:
        raise ApiError(400, "Invalid 'tool_choice': 'required' needs 'tools'.", param="tool_choice",
                       code="invalid_value")
    stops = _stops(request)
    if len(stops) > MAX_STOPS or not all(stops) or any(len(stop) > MAX_STOP_CHARS for stop in stops):
        raise ApiError(400, f"Invalid 'stop': it takes up to {MAX_STOPS} non-empty strings of at most "
                            f"{MAX_STOP_CHARS:,} characters each.", param="stop", code="invalid_value")


def _validation_error(exc: ValidationError) -> ApiError:
    first = exc.errors(include_url=False, include_input=False)[0]
    param = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]).lstrip(".")
    kind = first["type"]
    if kind == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'.", param=param,
                        code="missing_required_parameter")
    if kind == "extra_forbidden":
        return ApiError(400, f"Unsupported parameter: '{param}'. This server does not support it; remove it from "
                             "the request.", param=param, code="unsupported_parameter")
    message = first["msg"].removeprefix("Value error, ")
    code = "invalid_type" if kind.endswith(("_type", "_parsing")) or kind == "literal_error" else "invalid_value"
    return ApiError(400, f"Invalid '{param}': {message}.", param=param or None, code=code)


def engine_error(failure: EngineFailure) -> ApiError:
    """An engine failure as the client should see it: its own fault (400) or ours (5xx)."""
    message = f"{failure.message} {failure.fix}"
    if failure.kind is FailureKind.PROMPT_TOO_LONG:
        return ApiError(400, message, param="messages", code="context_length_exceeded")
    if failure.kind is FailureKind.BAD_MESSAGES:
        return ApiError(400, message, param="messages", code="invalid_value")
    if failure.kind is FailureKind.BAD_SCHEMA:
        return ApiError(400, f"Invalid 'response_format': {message}", param="response_format", code="invalid_value")
    if failure.kind in (FailureKind.NOT_READY, FailureKind.ENGINE_DIED):
        return ApiError(503, message, kind=SERVER_ERROR, code="engine_unavailable")
    return ApiError(500, message, kind=SERVER_ERROR, code="engine_error")


def public_model_id(model: str) -> str:
    """The model's name as clients see it: a local folder's name, never its path (it shows the home dir)."""
    path = Path(model)
    return path.name if path.is_absolute() or model.startswith((".", "~")) else model
