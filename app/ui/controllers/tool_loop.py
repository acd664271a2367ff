"""ToolLoop: a reply's tool rounds, from the calls a backend sent to their results, with no widgets.

Nalar bounds the rounds, not the model: a reply runs at most ``MAX_TOOL_ROUNDS`` rounds and each round at
most ``MAX_CALLS_PER_ROUND`` calls, and calls sent for a request that offered no tools or asked for none
(``tool_choice`` "none") never run, whatever the backend sends. Nothing runs until the user presses Run (or
chose "Always" for that tool before). Deny, Stop, Answer now and a refusal each give every call a result,
so the model always reads one tool message per call. Calls are tracked by their position in the round:
the ids are the server's, so duplicate or empty ones are replaced before anything is stored or sent back.
"""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QObject, Signal

from app.core.chat.conversation import NOT_RUN, ToolRound, ToolStep, Turn
from app.core.settings.settings import ToolsConfig
from app.engine.events import Finished, ToolCall
from app.engine.reply.tool_calls import new_call_id
from app.engine.requests import ToolChoice
from app.tools.mcp_client import DENIED_TEXT, ToolInfo
from app.ui.controllers.tools_controller import ToolsController

log = logging.getLogger(__name__)
SKIPPED_TEXT = "Skipped: the user asked for the answer now; the tool did not run."
CANCELLED_TEXT = "Cancelled: the user asked for the answer now before the tool finished."
# A model (or a server that ignores tool_choice) could call for ever, and "Always" tools would run unasked:
# past this many rounds the model is asked for its answer, and calls it sends anyway are refused.
MAX_TOOL_ROUNDS = 8
# One round can't queue an unbounded batch of runs (every call past this gets a refusal as its result).
MAX_CALLS_PER_ROUND = 8
REFUSED = "refused"  # a ToolStep's status: Nalar's bounds kept it from running


def tool_round(calls: tuple[ToolCall, ...], thinking: str, content: str, earlier: list[ToolRound]) -> ToolRound:
    """The calls as a round, each with an id no other call of the reply has (the server's where it is)."""
    taken = {step.call_id for done in earlier for step in done.calls}
    steps = []
    for call in calls:
        call_id = call.id if call.id and call.id not in taken else new_call_id()
        taken.add(call_id)
        steps.append(ToolStep(call_id, call.name, call.arguments))
    return ToolRound(thinking, steps, content)


class ToolLoop(QObject):
    """At most one round at a time (``round``); ``round_done`` once every call has a result."""

    step_changed = Signal(object)   # ToolStep: its status or result changed
    round_done = Signal()
    always_allowed = Signal(str)    # a tool key the user chose "Always for this tool" for
    notice = Signal(str)            # a bound of Nalar's kept calls from running

    def __init__(self, tools: ToolsController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tools = tools
        self.round: ToolRound | None = None
        self.sent_choice: ToolChoice | None = None  # what the reply's last request allowed; None: no tools
        self._config = ToolsConfig()
        self._offered: list[ToolInfo] = []
        self._running: dict[int, asyncio.Future[None]] = {}  # the call's position in the round: its task

    @property
    def active(self) -> bool:
        return self.round is not None

    @property
    def waiting(self) -> list[ToolStep]:
        """The calls that wait for the user's decision."""
        return [step for step in (self.round.calls if self.round else []) if step.status == "pending"]

    def tool_for(self, step: ToolStep) -> ToolInfo | None:
        return next((tool for tool in self._offered if tool.name == step.name), None)

    def next_choice(self, first_choice: ToolChoice, rounds_run: int, answer_now: bool) -> ToolChoice:
        """The follow-up's tool_choice: "none" once the model must answer (forced calls are one round)."""
        forced = first_choice not in ("auto", "none")
        return "none" if answer_now or forced or rounds_run >= MAX_TOOL_ROUNDS else "auto"

    def refusal(self, rounds_before: int) -> str | None:
        """Why calls the backend just sent may not run, or None when they may."""
        if self.sent_choice is None:
            return "the request offered no tools, yet the backend sent tool calls"
        if rounds_before >= MAX_TOOL_ROUNDS:
            return f"the reply reached Nalar's limit of {MAX_TOOL_ROUNDS} tool rounds"
        if self.sent_choice == "none":
            return "the request asked for no tool calls (tool_choice “none”), yet the backend sent some"
        return None

    def take(self, turn: Turn, finished: Finished, offered: list[ToolInfo], config: ToolsConfig) -> bool:
        """The calls a reply's request sent, as the turn's next round: begun, or refused (True: the reply ends)."""
        refusal = self.refusal(len(turn.tool_rounds))
        calls = tool_round(finished.tool_calls, finished.thinking_text, finished.answer_text, turn.tool_rounds)
        turn.tool_rounds.append(calls)
        if refusal is None:
            self.begin(calls, offered, config)
        else:
            self.refuse(calls, refusal)
        return refusal is not None

    def refuse(self, tool_round: ToolRound, why: str) -> None:
        """Every call of the round gets the refusal as its result; none runs."""
        for step in tool_round.calls:
            self._answer(step, f"Not run: {why}.", REFUSED)
        self.notice.emit(f"Nalar did not run the tool calls: {why}. The reply ends here.")

    def begin(self, tool_round: ToolRound, offered: list[ToolInfo], config: ToolsConfig) -> None:
        """Calls to unknown tools answer at once; "always" tools run; the rest wait for Run or Deny."""
        self.round, self._offered, self._config = tool_round, offered, config
        for position, step in enumerate(tool_round.calls):
            tool = self.tool_for(step)
            if position >= MAX_CALLS_PER_ROUND:
                self._answer(step, f"Not run: Nalar runs at most {MAX_CALLS_PER_ROUND} calls in one round.", REFUSED)
            elif tool is None:
                names = ", ".join(t.name for t in offered) or "none"
                self._answer(step, f"Error: no tool named {step.name!r} is available (offered: {names}).", "error")
            else:
                step.server = tool.server
                if tool.key in config.always_allow:
                    self._start(position, tool)
                else:
                    self.step_changed.emit(step)
        if len(tool_round.calls) > MAX_CALLS_PER_ROUND:
            self.notice.emit(f"The model asked for {len(tool_round.calls)} tool calls at once; Nalar runs at most "
                             f"{MAX_CALLS_PER_ROUND} in one round, and told it so for the rest.")
        self._check_done()

    def approve(self, step: ToolStep, *, always: bool = False) -> None:
        """Run a waiting call; ``always``: this tool runs without asking from now on."""
        position, tool = self._position(step), self.tool_for(step)
        if step.status != "pending" or tool is None or position is None:
            return
        if always:
            self._config = self._config.model_validate(
                {**self._config.model_dump(), "always_allow": (*self._config.always_allow, tool.key)})
            self.always_allowed.emit(tool.key)
        self._start(position, tool)
        if always and self.round is not None:  # the same tool's other calls in this round need no second click
            for other, waiting in enumerate(self.round.calls):
                if waiting.status == "pending" and self.tool_for(waiting) == tool:
                    self._start(other, tool)

    def deny(self, step: ToolStep) -> None:
        if step.status == "pending" and self._position(step) is not None:
            self._answer(step, DENIED_TEXT, "denied")
            self._check_done()

    def answer_now(self) -> None:
        """Every call gets a result now (skipped, or cancelled if it runs), and the round ends."""
        if self.round is None:
            return
        for step in self.waiting:
            self._answer(step, SKIPPED_TEXT, "denied")
        running, self._running = self._running, {}
        for position, task in running.items():
            task.cancel()
            self._answer(self.round.calls[position], CANCELLED_TEXT, "error")
        self._check_done()

    def stop(self) -> None:
        """The reply stops: waiting calls never run, running ones are cancelled; no ``round_done``."""
        if self.round is None:
            return
        stopped, self.round = self.round, None
        running, self._running = self._running, {}
        for task in running.values():
            task.cancel()
        for step in stopped.calls:
            if not step.done:
                self._answer(step, NOT_RUN, "stopped")

    # ---- internals -----------------------------------------------------------------------------

    def _position(self, step: ToolStep) -> int | None:
        """Where this very step is in the round (by identity: two calls may look alike)."""
        calls = self.round.calls if self.round is not None else []
        return next((index for index, call in enumerate(calls) if call is step), None)

    def _answer(self, step: ToolStep, text: str, status: str) -> None:
        step.result, step.status = text, status
        self.step_changed.emit(step)

    def _start(self, position: int, tool: ToolInfo) -> None:
        assert self.round is not None
        step = self.round.calls[position]
        step.status = "running"
        self.step_changed.emit(step)
        self._running[position] = asyncio.ensure_future(self._run(self.round, position, tool))

    async def _run(self, tool_round: ToolRound, position: int, tool: ToolInfo) -> None:
        step = tool_round.calls[position]
        try:
            result = await self.tools.call(tool, step.arguments, self._config.call_timeout_s)
        except asyncio.CancelledError:
            return  # stop() or answer_now() already gave the call its result
        except Exception as exc:  # the tools thread itself failed: the model is still told
            log.exception("tool call crashed")
            text, status = f"Error: the call failed inside Nalar ({exc}).", "error"
        else:
            text, status = result.text, result.status
        if self.round is not tool_round:  # stopped meanwhile
            return
        self._running.pop(position, None)
        self._answer(step, text, status)
        self._check_done()

    def _check_done(self) -> None:
        if self.round is not None and all(step.done for step in self.round.calls):
            self.round = None
            self.round_done.emit()
