"""Conversations to and from files. Export: Markdown to read, or Nalar's own JSON with every branch. Import:
Nalar's own JSON export (one conversation, or a list from ``--all``), branches included, or a plain OpenAI-style
message list (``[{"role", "content"}, …]``), which becomes one chat.

Everything is read and checked before anything is stored; a bad file raises ``ImportProblem`` naming what
is wrong and where, and the history is not touched. Imported chats get new ids, so importing a file twice
makes two copies instead of merging into (or overwriting) the stored one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.core.chat.answer_markup import dollar_maths
from app.core.chat.chat_settings import ChatSettings
from app.core.chat.conversation import Conversation, ThinkingEdit, ToolRound, ToolStep, Turn
from app.core.chat.images import image_from_url
from app.core.settings.settings import PresetValues

MAX_BYTES = 64 * 1024 * 1024
TURN_TEXTS = ("user", "thinking", "answer", "model", "kv_cache_dtype", "backend", "loop_guard")


class ImportProblem(ValueError):
    """What is wrong with the file, said so the user can fix it."""


@dataclass(frozen=True)
class Imported:
    conversations: list[Conversation]
    notes: list[str]  # what was read but could not be kept (e.g. system messages)


def read_import(path: Path) -> Imported:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ImportProblem(f"{path.name} is {size // 1024 // 1024} MiB; an import may be at most "
                                f"{MAX_BYTES // 1024 // 1024} MiB.")
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ImportProblem(f"{path} can't be read: {exc.strerror or exc}.") from exc
    except UnicodeDecodeError as exc:
        raise ImportProblem(f"{path.name} is not UTF-8 text (byte {exc.start}).") from exc
    except json.JSONDecodeError as exc:
        raise ImportProblem(f"{path.name} is not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.") from exc
    return parse_import(data)


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


def _nalar(data: dict[str, Any], where: str) -> Conversation:
    tree, shown = data.get("tree"), data.get("shown")
    items = tree if isinstance(tree, list) else data.get("messages")
    if not isinstance(items, list):
        raise ImportProblem(f"{where} has no \"messages\" list.")
    title = data.get("title", "Imported conversation")
    if not isinstance(title, str):
        raise ImportProblem(f"{where}: \"title\" is not text.")
    conversation = Conversation(title=title, thinking=bool(data.get("thinking", True)), tools=bool(data.get("tools")),
                                settings=_chat_settings(data.get("chat_settings"), where))
    for n, item in enumerate(items):
        spot = f"{where}, message {n + 1}"
        if not isinstance(item, dict):
            raise ImportProblem(f"{spot} is not an object.")
        parent = item.get("parent", n - 1 if n else None) if isinstance(tree, list) else (n - 1 if n else None)
        if parent is not None and (not isinstance(parent, int) or not 0 <= parent < n):
            raise ImportProblem(f"{spot}: \"parent\" {parent!r} is not an earlier message's index.")
        turn = _turn(item, spot)
        turn.parent = conversation.tree[parent] if parent is not None else None
        conversation.tree.append(turn)
    if conversation.tree:
        leaf = shown if isinstance(shown, int) and 0 <= shown < len(conversation.tree) else len(conversation.tree) - 1
        conversation.show(conversation.tree[leaf])
    return conversation


def _chat_settings(value: object, where: str) -> ChatSettings | None:
    """The chat's preset values as exported (None, or absent in older exports: it follows the default preset)."""
    if value is None:
        return None
    try:
        return ChatSettings.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ImportProblem(f"{where}: \"chat_settings\" {'.'.join(str(p) for p in first['loc'])}: "
                            f"{first['msg']}.") from exc


def _turn(item: dict[str, Any], spot: str) -> Turn:
    for key in TURN_TEXTS:
        if not isinstance(item.get(key, ""), str):
            raise ImportProblem(f"{spot}: \"{key}\" is not text.")
    if "user" not in item:
        raise ImportProblem(f"{spot} has no \"user\" text.")
    try:
        rounds = [ToolRound.from_json(r) for r in item.get("tool_rounds", [])]
        edits = [ThinkingEdit.from_json(e) for e in item.get("thinking_edits", [])]
        numbers = (int(item.get("thinking_tokens", 0)), int(item.get("answer_tokens", 0)),
                   None if item.get("ttft_s") is None else float(item["ttft_s"]), float(item.get("tok_s", 0.0)))
        images = tuple(replace(image_from_url(str(i["url"])), name=str(i.get("name") or ""))
                       for i in item.get("images", []))
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # ImageRefused is a ValueError
        raise ImportProblem(f"{spot}: a tool round, a thinking edit, an image or a figure is malformed "
                            f"({exc}).") from exc
    reason = item.get("finish_reason") or "stop"
    return Turn(**{key: item.get(key, "") for key in TURN_TEXTS}, finish_reason=str(reason), tool_rounds=rounds,
                thinking_edits=edits, images=images,
                thinking_tokens=numbers[0], answer_tokens=numbers[1], ttft_s=numbers[2], answer_tok_s=numbers[3])


def _openai(messages: list[dict[str, Any]], notes: list[str]) -> Conversation:
    """user → a new turn; assistant → its answer (tool_calls, with the tool messages after them, a round)."""
    conversation = Conversation()  # named after its first question below
    skipped, system = 0, ""
    for n, message in enumerate(messages):
        role, content, spot = message.get("role"), _text(message.get("content"), n), f"message {n + 1}"
        turn = conversation.leaf
        if role == "system" and not system and turn is None:
            system = content  # the chat's system prompt, as a preset's would be
        elif role == "system":
            skipped += 1
        elif role == "user":
            conversation.add_turn(Turn(user=content, finish_reason="stop"))
        elif role in ("assistant", "tool") and turn is None:
            raise ImportProblem(f"{spot} ({role}) comes before any user message.")
        elif role == "assistant" and turn is not None:
            calls = message.get("tool_calls") or []
            if calls:
                turn.tool_rounds.append(ToolRound("", [_call(call, spot) for call in calls], content))
            else:
                turn.answer = f"{turn.answer}\n\n{content}" if turn.answer else content
        elif role == "tool" and turn is not None:
            steps = [s for r in turn.tool_rounds for s in r.calls if s.call_id == message.get("tool_call_id")]
            if not steps:
                raise ImportProblem(f"{spot}: a tool result for no call made before it.")
            steps[0].result, steps[0].status = content, "ok"
        else:
            raise ImportProblem(f"{spot}: role {role!r} is not user, assistant, system or tool.")
    if not conversation.turns:
        raise ImportProblem("The message list has no user message.")
    if skipped:
        notes.append(f"{skipped} system message(s) after the first question not imported: a Nalar chat has one "
                     "system prompt, before its first question.")
    if system.strip():
        conversation.settings = ChatSettings(preset="Imported", values=PresetValues(system_prompt=system))
    conversation.title_from_first_message()
    return conversation


def _text(content: object, n: int) -> str:
    """A message's text: a string, or OpenAI's list of parts (text parts joined; others refused)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise ImportProblem(f"message {n + 1}: \"content\" is neither text nor a list of text parts.")


def _call(call: object, spot: str) -> ToolStep:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ImportProblem(f"{spot}: a tool call without a function name.")
    arguments = function.get("arguments", "{}")
    return ToolStep(str(call.get("id", "")), function["name"],
                    arguments if isinstance(arguments, str) else json.dumps(arguments), status="stopped")


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
           if value is not None]
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
            "tok_s": t.answer_tok_s, "images": [{"name": i.name, "url": i.data_url} for i in t.images]}


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
