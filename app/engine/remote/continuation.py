"""ServerContinuation: going on from a given text on a vLLM server (pause–edit–resume, Continue, a loop cut).

A chat-completions request can't do it: the server renders the prompt and the model starts a new reply. A
vLLM server also has ``/tokenize``, which renders a conversation with the model's own chat template, and
``/v1/completions``, which takes token ids. So the rendered prompt, the opened think block and the kept
text go in as ids, and the model writes on from exactly there, as on the local engine; vLLM's prefix cache
holds what the paused request had computed. ``probe`` finds out at connect time; a server without them
(or a model whose thinking is not plain ``<think>`` text) answers anew, and says why.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.core.models.model_families import ModelFamily, model_family
from app.core.settings.redaction import redact
from app.core.settings.settings import SamplingConfig
from app.core.tls import tls_context
from app.engine.base import Message
from app.engine.errors import EngineFailure, FailureKind
from app.engine.remote.answers import MAX_CONTEXT_TOKENS, MAX_TOKEN_ID, bad_answer, context_length
from app.engine.reply.harmony import REASONING_PARSER as HARMONY_REASONING
from app.engine.reply.reasoning import THINK_CLOSE, THINK_OPEN, ThinkStart, think_start_of_prompt
from app.engine.reply.tool_calls import without_reasoning
from app.engine.requests import Resume, Tools

log = logging.getLogger(__name__)

BYTES_PER_TOKEN = 12  # in a /tokenize answer: ", 151643" is 8 bytes; room for the spaces a server may add
ANSWER_SLACK_BYTES = 64 * 1024  # the JSON around the token list; all of a /detokenize answer of eight tokens
ERROR_TEXT_BYTES = 4096  # read of an error answer, for its message

NO_TOKENIZE = ("Pause needs a server that can go on from a given thinking: {url} has no vLLM /tokenize and "
               "/v1/completions, so an edited thinking can't be resumed there. Use a vLLM server or the local "
               "engine.")
CONTROL_TOKENS = ("Pause on a remote profile writes the thinking back as text, and “{model}” marks its thinking "
                  "with its own control tokens, which text can't spell. Use the local engine to pause it.")


def server_root(base_url: str) -> str:
    """The server's root, where vLLM serves /tokenize: the base URL less its trailing /v1."""
    root = base_url.rstrip("/")
    return root[:-3] if root.endswith("/v1") else root


def family_refusal(family: ModelFamily, model: str) -> str:
    """Why this model's thinking can't be written back as text, or "" where it can (plain ``<think>`` tags)."""
    if family.own_think_tokens is not None or family.parser == HARMONY_REASONING:
        return CONTROL_TOKENS.format(model=model)
    return ""


def continuation_text(resume: Resume, prompt_opened: bool, thinking_on: bool) -> tuple[str, ThinkStart]:
    """The text after the rendered prompt, and where the model then is: in its thinking, or in its answer.

    The think block is opened here unless the template's generation prompt already did (Qwen3 thinking,
    the R1 distills); a reply resumed in its answer gets the thinking closed, as the model closed it."""
    opened = "" if prompt_opened or not thinking_on else THINK_OPEN + "\n"
    thinking = opened + resume.thinking if thinking_on else ""
    if resume.phase == "thinking" and thinking_on:
        return thinking, "open"
    closed = f"{thinking}\n{THINK_CLOSE}\n\n" if thinking_on and resume.thinking else ""
    return closed + resume.answer, "closed"


@dataclass(frozen=True)
class ContinuationPrompt:
    ids: list[int]
    start: ThinkStart  # where the model is after the ids: "open" (thinking) or "closed" (answer)
    kept_tokens: int  # the kept text's tokens, which the reply's budgets already spent


class ServerContinuation:
    """One server's /tokenize and /detokenize for one model; /v1/completions goes through the openai client.

    The server is outside Nalar: each answer is read to a bound (what ``context`` tokens can take), within a
    timeout, and checked for its types; anything else is an EngineFailure naming the endpoint, never an
    exception that reads as the engine's fault. Stop reaches every request (RemoteEngine awaits ``prompt``
    under it)."""

    def __init__(self, http: httpx.AsyncClient, model: str, context: int = MAX_CONTEXT_TOKENS) -> None:
        self._http = http
        self.model = model
        self.root = str(http.base_url).rstrip("/")
        self.context = context  # the model's max_model_len, as the server's /tokenize says it

    @classmethod
    async def probe(cls, base_url: str, model: str, api_key: str, timeout: float) -> ServerContinuation | None:
        """The server's continuation, if it answers /tokenize as vLLM does; None otherwise (and the client is
        closed). vLLM doesn't guard /tokenize with its key, but a proxy in front may, so the key goes too."""
        # identity: a compressed answer could inflate past any bound in one read
        http = httpx.AsyncClient(base_url=server_root(base_url), timeout=httpx.Timeout(timeout), verify=tls_context(),
                                 headers={"Authorization": f"Bearer {api_key}", "Accept-Encoding": "identity"})
        server = cls(http, model)
        try:
            body = await server._post("/tokenize", {"model": model, "prompt": "ok"}, timeout)
            context = context_length(body.get("max_model_len"))
            if isinstance(body.get("tokens"), list) and context is not None:
                server.context = context
                return server
            log.info("%s/tokenize gave no token list and context: pause answers anew there", server.root)
        except EngineFailure as exc:
            log.info("no vLLM /tokenize at %s (%s): pause answers anew there", server.root, exc.kind.value)
        await http.aclose()
        return None

    async def close(self) -> None:
        await self._http.aclose()

    async def _post(self, path: str, body: dict[str, Any], timeout: float, limit: int = ANSWER_SLACK_BYTES,
                    overflow: EngineFailure | None = None) -> dict[str, Any]:
        """The JSON object ``path`` answers, read to at most ``limit`` bytes within ``timeout`` seconds.
        ``overflow``: the failure for a longer answer (by default, a bad answer)."""
        endpoint = self.root + path
        try:
            status, raw = await asyncio.wait_for(self._read(path, body, limit, timeout), timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise EngineFailure(FailureKind.TIMEOUT, f"{endpoint} did not answer within {timeout:g} s.",
                                "Check that the server is up and not overloaded, or raise the profile's "
                                "first-token budget.") from None
        except httpx.TransportError as exc:
            raise EngineFailure(FailureKind.UNREACHABLE, f"Can't reach {endpoint} ({type(exc).__name__}).",
                                "Check that the server is running and reachable from here.") from None
        if status != 200:
            text = redact(raw[:ERROR_TEXT_BYTES].decode("utf-8", "replace"))[:200]  # no part of a key at the cut
            raise EngineFailure(FailureKind.REQUEST_FAILED, f"{endpoint} answered {status}: {text}",
                                "Check the server's log; try again.")
        if len(raw) > limit:
            raise overflow or bad_answer(endpoint, f"more than {limit:,} bytes")
        try:
            result = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's depth
            raise bad_answer(endpoint, "something that is not JSON") from None
        if not isinstance(result, dict):
            raise bad_answer(endpoint, f"a JSON {type(result).__name__}, not an object")
        return result

    async def _read(self, path: str, body: dict[str, Any], limit: int, timeout: float) -> tuple[int, bytes]:
        """The status and at most ``limit`` + one chunk of the body, as sent (a longer body is left unread)."""
        async with self._http.stream("POST", path, json=body, timeout=timeout) as answer:
            encoding = answer.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                raise bad_answer(self.root + path, f"a body compressed with {encoding[:40]}, which was not asked for")
            limit = limit if answer.status_code == 200 else ERROR_TEXT_BYTES
            got = bytearray()
            async for chunk in answer.aiter_raw():
                got += chunk
                if len(got) > limit:
                    break
            return answer.status_code, bytes(got)

    def _past_context(self, endpoint: str) -> EngineFailure:
        return EngineFailure(FailureKind.PROMPT_TOO_LONG,
                             f"{endpoint} counts more tokens than the model's context ({self.context:,}) in "
                             "what would be resumed.",
                             "Shorten the edited thinking, or start a new conversation. If the conversation is "
                             f"short, the server's answer is wrong: check the server at {self.root}.")

    async def _token_ids(self, request: dict[str, Any], timeout: float) -> list[int]:
        """/tokenize's ids for ``request``: at most the model's context, each an id."""
        endpoint = self.root + "/tokenize"
        limit = self.context * BYTES_PER_TOKEN + ANSWER_SLACK_BYTES
        tokens = (await self._post("/tokenize", request, timeout, limit, self._past_context(endpoint))).get("tokens")
        if not isinstance(tokens, list):
            raise bad_answer(endpoint, f"no token list (its \"tokens\" is {type(tokens).__name__})")
        if len(tokens) > self.context:
            raise self._past_context(endpoint)
        if not all(type(token) is int and 0 <= token <= MAX_TOKEN_ID for token in tokens):
            raise bad_answer(endpoint, "a token list with items that are no token ids")
        return tokens

    async def tokens(self, text: str, timeout: float) -> list[int]:
        if not text:
            return []
        return await self._token_ids({"model": self.model, "prompt": text, "add_special_tokens": False}, timeout)

    async def prompt(self, messages: Sequence[Message], sampling: SamplingConfig, resume: Resume,
                     thinking_on: bool, tools: Tools | None, timeout: float) -> ContinuationPrompt:
        """The ids to send: the conversation as the server's chat template renders it (with the generation
        prompt, the Think switch and the tools, as its chat endpoint would), then the continuation. Each of
        its requests has ``timeout`` seconds."""
        request: dict[str, Any] = {"model": self.model, "messages": without_reasoning(messages),
                                   "add_generation_prompt": True}
        if model_family(self.model).thinking == "hybrid":
            request["chat_template_kwargs"] = {"enable_thinking": sampling.thinking}
        if tools:
            request["tools"] = list(tools)
        prompt_ids = await self._token_ids(request, timeout)
        detokenized = await self._post("/detokenize", {"model": self.model, "tokens": prompt_ids[-8:]}, timeout)
        tail = detokenized.get("prompt")
        if not isinstance(tail, str):
            raise bad_answer(self.root + "/detokenize", "no text (its \"prompt\" is not a string)")
        text, start = continuation_text(resume, think_start_of_prompt(tail) == "open", thinking_on)
        kept = await self.tokens(text, timeout)
        if len(prompt_ids) + len(kept) > self.context:
            raise EngineFailure(FailureKind.PROMPT_TOO_LONG,
                                f"The conversation and the kept text come to {len(prompt_ids) + len(kept):,} tokens "
                                f"at {self.root}, more than the model's context ({self.context:,}).",
                                "Shorten the edited thinking, or start a new conversation.")
        return ContinuationPrompt(prompt_ids + kept, start, len(kept))
