"""Conversations to and from files. Export: Markdown to read, or Nalar's own JSON with every branch. Import:
Nalar's own JSON export (one conversation, or a list from ``--all``), branches included, or a plain OpenAI-style
message list (``[{"role", "content"}, …]``), which becomes one chat.

Everything is read and checked before anything is stored, and every value is checked for its type and range
as it is read (the ``_…In`` models below): a file is hostile until checked, and a wrong value that reached the
store (a tool call named ``2``) made its chat impossible to show, continue or export. A bad file raises one
``ImportProblem`` naming the file and the item, and the history is not touched. Only a regular file is read,
at most ``MAX_BYTES``; the JSON parser (pydantic-core's) bounds nesting and refuses lone surrogates, which
SQLite can't store. Every step is linear in the file's size. Imported chats get new ids, so importing a file
twice makes two copies instead of merging into (or overwriting) the stored one.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import from_json

from app.core.chat.answer_markup import dollar_maths
from app.core.chat.chat_settings import ChatSettings
from app.core.chat.conversation import Conversation, Source, ThinkingEdit, ToolRound, ToolStep, Turn, TurnKnowledge
from app.core.chat.images import ImagePart, image_from_url
from app.core.safe_files import FileTooLarge, NotRegularFile, read_regular
from app.core.settings.settings import PresetValues

MAX_BYTES = 64 * 1024 * 1024
MAX_COUNT = 10**9  # a token count (SQLite's INTEGER holds 2**63; a real count is far below this)
MAX_SECONDS = 10.0**9  # time to first token, tokens per second: finite and non-negative


class ImportProblem(ValueError):
    """What is wrong with the file, said so the user can fix it: the file's name (once known), then the item."""

    def __init__(self, problem: str, file: str = "") -> None:
        super().__init__(f"{file}: {problem}" if file else problem)
        self.problem, self.file = problem, file


@dataclass(frozen=True)
class Imported:
    conversations: list[Conversation]
    notes: list[str]  # what was read but could not be kept (e.g. system messages)

    @property
    def turns(self) -> int:
        return sum(len(c.tree) for c in self.conversations)


def read_import(path: Path) -> Imported:
    try:
        return parse_import(_read_json(path))
    except ImportProblem as problem:
        raise ImportProblem(problem.problem, path.name) from problem


def _read_json(path: Path) -> Any:
    """The file's JSON, read as attachments are (``read_regular``: a regular file only, at most MAX_BYTES + 1 bytes):
    a FIFO blocked for ever, a link to /dev/zero was read until memory ran out."""
    try:
        raw = read_regular(path, MAX_BYTES)
    except NotRegularFile:
        raise ImportProblem("is not a regular file; choose a JSON file.") from None
    except FileTooLarge as exc:
        raise ImportProblem(f"is {exc.size // 2**20} MiB; an import may be at most {MAX_BYTES >> 20} MiB.") from None
    except OSError as exc:
        raise ImportProblem(f"can't be read: {exc.strerror or exc}.") from exc
    try:
        text = raw.decode("utf-8-sig")  # a leading BOM (some Windows editors write one) is no problem
    except UnicodeDecodeError as exc:
        raise ImportProblem(f"is not UTF-8 text (byte {exc.start}).") from exc
    try:  # Rust's parser: no recursion on Python's stack, nesting bounded, lone surrogates refused
        return from_json(text, allow_inf_nan=True, cache_strings=False)  # inf and NaN: refused where read, by name
    except ValueError as exc:
        raise ImportProblem(f"is not JSON: {exc}.") from exc


def parse_import(data: object) -> Imported:
    notes: list[str] = []
    if isinstance(data, dict):
        return Imported([_nalar(data, "the conversation")], notes)
    if isinstance(data, list) and data and all(isinstance(item, dict) and "role" in item for item in data):
        return Imported([_openai(data, notes)], notes)
    if isinstance(data, list) and data and all(isinstance(item, dict) for item in data):
        return Imported([_nalar(item, f"conversation {n + 1}") for n, item in enumerate(data)], notes)
    raise ImportProblem("The file is neither a Nalar export (an object with \"messages\", or a list of them) nor a "
                        "list of chat messages ({\"role\": …, \"content\": …}).")


# ---- what a file may hold: every value's type and range ----------------------------------------------------

def _whole_unicode(text: str) -> str:
    """No lone surrogate (SQLite can't store one). The parser refuses them already; data given as Python
    objects (``parse_import``) is checked here."""
    if not text.isascii():
        text.encode("utf-8")  # UnicodeEncodeError is a ValueError: pydantic names the field
    return text


Text = Annotated[str, AfterValidator(_whole_unicode)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Seconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)]


class _In(BaseModel):
    """Strict: no value is turned into another type (``2`` is not text, ``true`` not a count). Unknown keys
    are ignored, so a newer export still reads."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class _StepIn(_In):
    call_id: Text
    name: Text
    arguments: Text
    server: Text = ""
    result: Text = ""
    status: Text = "pending"


class _RoundIn(_In):
    thinking: Text = ""
    calls: list[_StepIn] = []
    content: Text = ""


class _EditIn(_In):
    original: Text = ""
    edited: Text = ""


class _ImageIn(_In):
    url: Text
    name: Text = ""


class _SourceIn(_In):
    collection: Text
    path: Text  # opened only inside the collection's folders as they are on this machine (ui/knowledge/sources)
    page: Count | None = None
    line_start: Count | None = None
    line_end: Count | None = None
    text: Text = ""


class _KnowledgeIn(_In):
    summary: Text = ""
    block: Text = ""
    budget: Count = 0
    sources: list[_SourceIn] = []


class _TurnIn(_In):
    user: Text
    thinking: Text = ""
    answer: Text = ""
    model: Text = ""
    kv_cache_dtype: Text = ""
    backend: Text = ""
    loop_guard: Text = ""
    finish_reason: Text | None = None
    tool_rounds: list[_RoundIn] = []
    thinking_edits: list[_EditIn] = []
    thinking_tokens: Count = 0
    answer_tokens: Count = 0
    ttft_s: Seconds | None = None
    tok_s: Seconds = 0.0
    images: list[_ImageIn] = []
    knowledge: _KnowledgeIn | None = None
    parent: Annotated[int, Field(ge=0)] | None = None  # read only from "tree"; absent: the message before


class _ConversationIn(_In):
    title: Text = "Imported conversation"
    thinking: bool = True
    tools: bool = False
    chat_settings: dict[str, Any] | None = None  # ChatSettings' own model checks it
    messages: Any = None  # a list, checked in _nalar (its problem has its own words)
    tree: list[Any] | None = None  # every branch (Nalar's own export); absent: "messages" is one branch
    shown: Annotated[int, Field(ge=0)] | None = None


PLACES = {"tool_rounds": "tool round", "calls": "call", "thinking_edits": "thinking edit", "images": "image",
          "tool_calls": "tool call", "sources": "source"}
SAID = {"string_type": "is not text", "int_type": "is not a whole number", "float_type": "is not a number",
        "bool_type": "is not true or false", "list_type": "is not a list", "model_type": "is not an object",
        "dict_type": "is not an object", "finite_number": "is not a finite number", "value_error": "is not valid text"}


def _checked(model: type[_In], value: object, spot: str) -> Any:
    """``value`` read as ``model``, or an ImportProblem naming ``spot``, the item inside it and the field."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ImportProblem(_said(exc.errors()[0], spot)) from None


def _said(error: Any, spot: str) -> str:
    """One pydantic error in the file's words: 'message 3, tool round 1, call 2: "name" is not text (2)'."""
    places, field, loc = [spot], "", list(error["loc"])
    for key, index in itertools.zip_longest(loc, loc[1:]):
        if isinstance(key, str) and key in PLACES and isinstance(index, int):
            places.append(f"{PLACES[key]} {index + 1}")
        elif isinstance(key, str):
            field = key
    where = ", ".join(places)
    kind = error["type"]
    if kind == "missing":
        return f'{where} has no "{field}".'
    if kind in ("model_type", "dict_type") and not field:
        return f"{where} is not an object."
    shown = repr(error.get("input"))
    got = f" ({shown[:40]}{'…' if len(shown) > 40 else ''})" if kind not in ("model_type", "dict_type") else ""
    what = SAID.get(kind) or "should " + error["msg"].removeprefix("Input should ")
    return f'{where}: "{field}" {what}{got}.' if field else f"{where} {what}{got}."


# ---- Nalar's own export -------------------------------------------------------------------------------------

def _nalar(data: dict[str, Any], where: str) -> Conversation:
    read: _ConversationIn = _checked(_ConversationIn, data, where)
    tree = read.tree
    items = tree if tree is not None else read.messages
    if not isinstance(items, list):
        raise ImportProblem(f"{where} has no \"messages\" list.")
    conversation = Conversation(title=read.title, thinking=read.thinking, tools=read.tools,
                                settings=_chat_settings(read.chat_settings, where))
    for n, item in enumerate(items):
        spot = f"{where}, message {n + 1}"
        turn_in: _TurnIn = _checked(_TurnIn, item, spot)
        parent = turn_in.parent if tree is not None and "parent" in turn_in.model_fields_set else (n - 1 if n else None)
        if parent is not None and not parent < n:
            raise ImportProblem(f"{spot}: \"parent\" {parent!r} is not an earlier message's index.")
        turn = _turn(turn_in, spot)
        turn.parent = conversation.tree[parent] if parent is not None else None
        conversation.tree.append(turn)
    if read.shown is not None and read.shown >= len(conversation.tree):
        raise ImportProblem(f"{where}: \"shown\" {read.shown} is not one of its {len(conversation.tree)} messages.")
    if conversation.tree:
        conversation.show(conversation.tree[len(conversation.tree) - 1 if read.shown is None else read.shown])
    return conversation


def _chat_settings(value: dict[str, Any] | None, where: str) -> ChatSettings | None:
    """The chat's preset values as exported (None, or absent in older exports: it follows the default preset)."""
    if value is None:
        return None
    try:
        return ChatSettings.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ImportProblem(f"{where}: \"chat_settings\" {'.'.join(str(p) for p in first['loc'])}: "
                            f"{first['msg']}.") from exc


def _turn(read: _TurnIn, spot: str) -> Turn:
    rounds = [ToolRound(r.thinking, [ToolStep(c.call_id, c.name, c.arguments, c.server, c.result, c.status)
                                     for c in r.calls], r.content) for r in read.tool_rounds]
    return Turn(user=read.user, thinking=read.thinking, answer=read.answer, model=read.model,
                kv_cache_dtype=read.kv_cache_dtype, backend=read.backend, loop_guard=read.loop_guard,
                finish_reason=read.finish_reason or "stop", tool_rounds=rounds,
                thinking_edits=[ThinkingEdit(e.original, e.edited) for e in read.thinking_edits],
                images=tuple(_image(image, f"{spot}, image {n}") for n, image in enumerate(read.images, 1)),
                thinking_tokens=read.thinking_tokens, answer_tokens=read.answer_tokens, ttft_s=read.ttft_s,
                answer_tok_s=read.tok_s, knowledge=None if (k := read.knowledge) is None else TurnKnowledge(
                    k.summary, k.block, tuple(Source(s.collection, s.path, s.page, s.line_start, s.line_end, s.text)
                                              for s in k.sources), k.budget))


def _image(read: _ImageIn, spot: str) -> ImagePart:
    try:
        return replace(image_from_url(read.url), name=read.name)
    except Exception as exc:  # ImageRefused; Pillow raises many kinds on hostile bytes (a decompression bomb)
        raise ImportProblem(f"{spot} can't be read: {exc}.") from exc


# ---- an OpenAI-style message list ---------------------------------------------------------------------------

class _FunctionIn(_In):
    name: Text
    arguments: Any = "{}"  # JSON text, or (some exporters) the JSON value itself


class _CallIn(_In):
    id: Text = ""
    function: _FunctionIn


class _MessageIn(_In):
    role: Any = None  # named in the problem when it is no known role
    content: Any = None  # text, or OpenAI's list of parts (_text)
    tool_calls: list[_CallIn] | None = None
    tool_call_id: Text | None = None


def _openai(messages: list[dict[str, Any]], notes: list[str]) -> Conversation:
    """user → a new turn; assistant → its answer (tool_calls, with the tool messages after them, a round).
    One pass: a turn's answers are joined once, and its calls are found by id in a table."""
    conversation = Conversation()  # named after its first question below
    skipped, system = 0, ""
    answers: list[str] = []  # the shown turn's answer parts
    calls: dict[str, ToolStep] = {}  # the shown turn's calls by id (the first of each id takes its result)
    for n, message in enumerate(messages):
        spot = f"message {n + 1}"
        read: _MessageIn = _checked(_MessageIn, message, spot)
        role, content, turn = read.role, _text(read.content, spot), conversation.leaf
        if role == "system" and not system and turn is None:
            system = content  # the chat's system prompt, as a preset's would be
        elif role == "system":
            skipped += 1  # after the first question: a Nalar chat has one system prompt, before it
        elif role == "user":
            _join_answer(turn, answers)
            conversation.add_turn(Turn(user=content, finish_reason="stop"))
            answers, calls = [], {}
        elif role in ("assistant", "tool") and turn is None:
            raise ImportProblem(f"{spot} ({role}) comes before any user message.")
        elif role == "assistant" and turn is not None:
            if read.tool_calls:
                steps = [_call(call, f"{spot}, tool call {k}") for k, call in enumerate(read.tool_calls, 1)]
                turn.tool_rounds.append(ToolRound("", steps, content))
                for made in steps:
                    calls.setdefault(made.call_id, made)
            else:
                answers.append(content)
        elif role == "tool" and turn is not None:
            step = calls.get(read.tool_call_id) if read.tool_call_id is not None else None
            if step is None:
                raise ImportProblem(f"{spot}: a tool result for no call made before it.")
            step.result, step.status = content, "ok"
        else:
            raise ImportProblem(f"{spot}: role {str(role)[:40]!r} is not user, assistant, system or tool.")
    _join_answer(conversation.leaf, answers)
    if not conversation.turns:
        raise ImportProblem("The message list has no user message.")
    if skipped:
        notes.append(f"{skipped} system message(s) after the first question not imported: a Nalar chat has one "
                     "system prompt, before its first question.")
    if system.strip():
        conversation.settings = ChatSettings(preset="Imported", values=PresetValues(system_prompt=system))
    conversation.title_from_first_message()
    return conversation


def _join_answer(turn: Turn | None, answers: list[str]) -> None:
    """A turn's assistant messages as one answer, blank-line separated; empty ones before the first text dropped."""
    if turn is not None:
        turn.answer = "\n\n".join(itertools.dropwhile(lambda part: not part, answers))


def _text(content: object, spot: str) -> str:
    """A message's text: a string, or OpenAI's list of parts (text parts joined; others refused)."""
    if content is None or isinstance(content, str):
        return _whole_unicode(content or "")
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text", ""), str) for p in content):
        return _whole_unicode("".join(p.get("text", "") for p in content))
    raise ImportProblem(f"{spot}: \"content\" is neither text nor a list of text parts.")


def _call(call: _CallIn, spot: str) -> ToolStep:
    arguments = call.function.arguments
    if not isinstance(arguments, str):
        try:
            arguments = json.dumps(arguments)
        except (TypeError, ValueError, RecursionError) as exc:  # only from data given as Python objects
            raise ImportProblem(f"{spot}: \"arguments\" is not JSON ({type(exc).__name__}).") from exc
    return ToolStep(call.id, call.function.name, _whole_unicode(arguments), status="stopped")


# ---- export ------------------------------------------------------------------------------------

def export_markdown(conversation: Conversation) -> str:
    lines = [f"# {conversation.title}", ""]
    if conversation.settings is not None:
        lines += _settings_markdown(conversation.settings)
    for turn in conversation.turns:
        lines += ["## You", "", turn.user, ""]
        lines += [f"[image: {i.name or 'unnamed'}, {i.width}×{i.height}, {i.mime}]" for i in turn.images] + \
            ([""] if turn.images else [])
        for tool_round in turn.tool_rounds:
            if tool_round.thinking.strip():
                lines += ["<details><summary>Thinking</summary>", "", tool_round.thinking.strip(), "", "</details>",
                          ""]
            for call in tool_round.calls:
                lines += [f"**Tool call** `{call.name}` ({call.status})", "", "```json", call.arguments, "```", "",
                          "<details><summary>Result</summary>", "", "```text", call.result, "```", "", "</details>",
                          ""]
        if turn.thinking:
            lines += ["<details><summary>Thinking</summary>", "", turn.thinking.strip(), "", "</details>", ""]
        lines += _edits_markdown(turn)
        note = "" if turn.finish_reason in (None, "stop") else f" ({turn.finish_reason})"
        lines += [f"## Nalar{note}", "", dollar_maths(turn.answer), ""]
    return "\n".join(lines)


def export_json(conversation: Conversation) -> str:
    """The shown branch as ``messages``; every branch as ``tree`` (each turn with its parent's index in it)
    and ``shown`` (the leaf's index), so an import brings the branches back."""
    place = {id(turn): n for n, turn in enumerate(conversation.tree)}
    leaf = conversation.leaf
    return json.dumps({
        "format": "nalar-conversation", "version": 1, "id": conversation.id, "title": conversation.title,
        "thinking": conversation.thinking, "tools": conversation.tools,
        "chat_settings": conversation.settings.model_dump() if conversation.settings else None,
        "messages": [_turn_json(t) for t in conversation.turns],
        "tree": [_turn_json(t) | {"parent": place.get(id(t.parent))} for t in conversation.tree],
        "shown": place.get(id(leaf)) if leaf else None}, indent=2, ensure_ascii=False)


def _settings_markdown(chat: ChatSettings) -> list[str]:
    """The chat's preset values above the transcript: the system prompt quoted, the sampling on one line."""
    v = chat.values
    own = [f"{name.replace('_', ' ')} {value}" for name, value in v.model_dump(exclude={"system_prompt"}).items()
           if value not in (None, ())]
    lines = [" · ".join([f"*Preset:* {chat.preset or 'custom'}", *own, "the rest as in Settings"]), ""]
    if v.system_prompt.strip():
        lines += ["*System prompt:*", "", *(f"> {line}" for line in v.system_prompt.strip().splitlines()), ""]
    return lines


def _turn_json(t: Turn) -> dict[str, Any]:
    return {"user": t.user, "thinking": t.thinking, "answer": t.answer, "finish_reason": t.finish_reason,
            "model": t.model, "kv_cache_dtype": t.kv_cache_dtype, "backend": t.backend, "loop_guard": t.loop_guard,
            "tool_rounds": [tool_round.to_json() for tool_round in t.tool_rounds],
            "thinking_edits": [edit.to_json() for edit in t.thinking_edits],
            "thinking_tokens": t.thinking_tokens, "answer_tokens": t.answer_tokens, "ttft_s": t.ttft_s,
            "tok_s": t.answer_tok_s, "images": [{"name": i.name, "url": i.data_url} for i in t.images],
            "knowledge": json.loads(t.knowledge.to_json()) if t.knowledge is not None else None}


def _edits_markdown(turn: Turn) -> list[str]:
    """Where the user paused and edited the thinking: the place, the model's text there and the user's."""
    lines: list[str] = []
    for n, edit in enumerate(turn.thinking_edits, 1):
        removed = edit.original[edit.at:]
        lines += [f"<details><summary>✎ Thinking edited by the user (edit {n}, from character {edit.at})"
                  "</summary>", "", "The model had written:", "", "```text", removed or "(nothing: the user added)",
                  "```", "", "The user wrote instead, and the model went on from there:", "", "```text",
                  edit.inserted or "(nothing: the user cut it)", "```", "", "</details>", ""]
    return lines
