"""Reply: the reply shown in the window, as a Qt-free model that views observe.

It is the one place the window keeps a reply's text: the session feeds it the bridge's deltas, the panes
draw what it announces, and partial saves, Copy and the UI benchmark read it. Observers connect plain
callbacks to its ``Emitter``s, so tests drive it, and read it, with no window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from app.core.chat.conversation import ThinkingEdit, ToolRound, ToolStep, Turn

T = TypeVar("T")
Phase = Literal["thinking", "answer"]
# idle: nothing shown; streaming: a request runs; tools: its calls wait or run; finished: a reply that ended
ReplyState = Literal["idle", "streaming", "tools", "finished"]
AFTER_TOOLS = "\n\n— after the tool results —\n"  # in the thinking trace, between a reply's requests


class Emitter(Generic[T]):
    """One kind of change: ``connect`` a callback, ``emit`` calls each in order, on the caller's thread."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[[T], object]] = []

    def connect(self, callback: Callable[[T], object]) -> None:
        self._callbacks.append(callback)

    def emit(self, value: T) -> None:
        for callback in list(self._callbacks):
            callback(value)


@dataclass(frozen=True)
class LoopNote:
    """What the loop guard did in the reply, as a view shows it (the engine's LoopDetected, told plainly)."""

    summary: str
    phase: Phase
    outcome: str  # "warned" leaves the text; any other outcome cut it at ``kept_char``
    start_char: int  # where the repeated span began, in the phase's text of this request
    kept_char: int  # the phase's text is kept up to here
    copies: int

    @property
    def cut(self) -> bool:
        return self.outcome != "warned"


class Reply:
    """The thinking, answer, tool rounds and state of the reply in the panes (streaming, or the last one)."""

    def __init__(self) -> None:
        self.state: ReplyState = "idle"
        self.finish_reason: str | None = None
        self.rounds: list[ToolRound] = []
        self.thinking_tokens = 0
        self.backend = ""
        self.edits: list[ThinkingEdit] = []  # the user's edits to this reply's thinking (pause, edit, resume)
        self._thinking: list[str] = []
        self._answer: list[str] = []
        self._answering = False  # this request's answer has begun
        self.reset = Emitter[None]()             # everything changed: draw it again from the model
        self.thinking_added = Emitter[str]()
        self.answer_started = Emitter[None]()    # this request's first answer text is about to be added
        self.answer_added = Emitter[str]()
        self.loop_noted = Emitter[LoopNote]()    # after the text is cut, if the guard cut it
        self.round_added = Emitter[ToolRound]()  # the reply called tools
        self.step_changed = Emitter[ToolStep]()
        self.continued = Emitter[None]()         # the results went back: thinking goes on, the answer restarts
        self.tokens_counted = Emitter[int]()
        self.backend_changed = Emitter[str]()
        self.state_changed = Emitter[ReplyState]()

    @property
    def thinking(self) -> str:
        """The thinking of the reply's current request (earlier requests' is in ``rounds``)."""
        if len(self._thinking) > 1:
            self._thinking[:] = ["".join(self._thinking)]
        return self._thinking[0] if self._thinking else ""

    @property
    def answer(self) -> str:
        if len(self._answer) > 1:
            self._answer[:] = ["".join(self._answer)]
        return self._answer[0] if self._answer else ""

    @property
    def in_thinking(self) -> bool:
        """The current request has not begun its answer."""
        return not self._answering

    @property
    def trace(self) -> str:
        """The whole thinking as the thinking pane shows it: each request's, with a marker between them."""
        return AFTER_TOOLS.join([*(r.thinking for r in self.rounds), self.thinking]) if self.rounds else self.thinking

    def begin(self, backend: str, thinking: str = "", answer: str = "") -> None:
        """A new reply streams; ``thinking`` and ``answer``: the kept text it goes on from (Continue anyway)."""
        self._set(thinking, answer, [], "streaming", None)
        self.backend, self.thinking_tokens = backend, 0
        self._answering = bool(answer)
        self.reset.emit(None)

    def load(self, turn: Turn | None) -> None:
        """Show a finished reply (a conversation was opened), or nothing."""
        if turn is None:
            self._set("", "", [], "idle", None)
            self.backend, self.thinking_tokens = "", 0
            self.edits = []
        else:
            self._set(turn.thinking, turn.answer, list(turn.tool_rounds), "finished", turn.finish_reason)
            self.backend, self.thinking_tokens = turn.backend, turn.thinking_tokens
            self.edits = list(turn.thinking_edits)
        self.reset.emit(None)

    def add_thinking(self, text: str) -> None:
        self._thinking.append(text)
        self.thinking_added.emit(text)

    def add_answer(self, text: str) -> None:
        if not self._answering:
            self._answering = True
            self.answer_started.emit(None)
        self._answer.append(text)
        self.answer_added.emit(text)

    def note_loop(self, note: LoopNote) -> None:
        """The loop guard's finding; a cut keeps the phase's text as the engine kept it."""
        if note.cut:
            texts = self._thinking if note.phase == "thinking" else self._answer
            kept = "".join(texts)[:note.kept_char]
            texts[:] = [kept] if kept else []
        self.loop_noted.emit(note)

    def add_round(self, tool_round: ToolRound) -> None:
        self.rounds.append(tool_round)
        self._set_state("tools")
        self.round_added.emit(tool_round)

    def update_step(self, step: ToolStep) -> None:
        self.step_changed.emit(step)

    def continue_after_tools(self) -> None:
        """The next request of the reply: its thinking follows the rounds', its answer starts afresh."""
        self._thinking.clear()
        self._answer.clear()
        self._answering = False
        self._set_state("streaming")
        self.continued.emit(None)

    def count_tokens(self, thinking_tokens: int) -> None:
        self.thinking_tokens = thinking_tokens
        self.tokens_counted.emit(thinking_tokens)

    def set_backend(self, backend: str) -> None:
        self.backend = backend
        self.backend_changed.emit(backend)

    def finish(self, reason: str, thinking: str, answer: str) -> None:
        """The reply ended; the engine's final texts are the reply's (they match what streamed)."""
        self._thinking[:] = [thinking] if thinking else []
        self._answer[:] = [answer] if answer else []
        self.finish_reason = reason
        self._set_state("finished")

    def _set(self, thinking: str, answer: str, rounds: list[ToolRound], state: ReplyState,
             reason: str | None) -> None:
        self._thinking[:] = [thinking] if thinking else []
        self._answer[:] = [answer] if answer else []
        self.rounds, self.state, self.finish_reason = rounds, state, reason
        self._answering = bool(answer)

    def _set_state(self, state: ReplyState) -> None:
        self.state = state
        self.state_changed.emit(state)
