"""ToolLoop: the calls of one reply step, from approval to result, with no widgets.

Nothing runs until the user presses Run (or chose "Always" for that tool before). Deny, Stop and
Answer now each give every call a result, so the model always reads one tool message per call.
"""

from __future__ import annotations

import asyncio
import logging

from PySide6.QtCore import QObject, Signal

from app.core.chat.conversation import NOT_RUN, ToolRound, ToolStep
from app.core.settings.settings import ToolsConfig
from app.tools.mcp_client import DENIED_TEXT, ToolInfo
from app.ui.controllers.tools_controller import ToolsController

log = logging.getLogger(__name__)
SKIPPED_TEXT = "Skipped: the user asked for the answer now; the tool did not run."
CANCELLED_TEXT = "Cancelled: the user asked for the answer now before the tool finished."


class ToolLoop(QObject):
    """At most one round at a time (``round``); ``round_done`` once every call has a result."""

    step_changed = Signal(object)   # ToolStep: its status or result changed
    round_done = Signal()
    always_allowed = Signal(str)    # a tool key the user chose "Always for this tool" for

    def __init__(self, tools: ToolsController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tools = tools
        self.round: ToolRound | None = None
        self._config = ToolsConfig()
        self._offered: list[ToolInfo] = []
        self._running: dict[str, asyncio.Future[None]] = {}  # call id: its task

    @property
    def active(self) -> bool:
        return self.round is not None

    @property
    def waiting(self) -> list[ToolStep]:
        """The calls that wait for the user's decision."""
        return [step for step in (self.round.calls if self.round else []) if step.status == "pending"]

    def tool_for(self, step: ToolStep) -> ToolInfo | None:
        return next((tool for tool in self._offered if tool.name == step.name), None)

    def begin(self, tool_round: ToolRound, offered: list[ToolInfo], config: ToolsConfig) -> None:
        """Calls to unknown tools answer at once; "always" tools run; the rest wait for Run or Deny."""
        self.round, self._offered, self._config = tool_round, offered, config
        for step in tool_round.calls:
            tool = self.tool_for(step)
            if tool is None:
                names = ", ".join(t.name for t in offered) or "none"
                self._answer(step, f"Error: no tool named {step.name!r} is available (offered: {names}).", "error")
                continue
            step.server = tool.server
            if tool.key in config.always_allow:
                self._start(step, tool)
            else:
                self.step_changed.emit(step)
        self._check_done()

    def approve(self, step: ToolStep, *, always: bool = False) -> None:
        """Run a waiting call; ``always``: this tool runs without asking from now on."""
        tool = self.tool_for(step)
        if step.status != "pending" or tool is None or self.round is None or step not in self.round.calls:
            return
        if always:
            self._config = self._config.model_validate(
                {**self._config.model_dump(), "always_allow": (*self._config.always_allow, tool.key)})
            self.always_allowed.emit(tool.key)
        self._start(step, tool)
        if always:  # the same tool's other calls in this round need no second click
            for other in self.waiting:
                if self.tool_for(other) == tool:
                    self._start(other, tool)

    def deny(self, step: ToolStep) -> None:
        if step.status == "pending" and self.round is not None and step in self.round.calls:
            self._answer(step, DENIED_TEXT, "denied")
            self._check_done()

    def answer_now(self) -> None:
        """Every call gets a result now (skipped, or cancelled if it runs), and the round ends."""
        if self.round is None:
            return
        for step in self.waiting:
            self._answer(step, SKIPPED_TEXT, "denied")
        for call_id, task in list(self._running.items()):
            task.cancel()
            step = next(s for s in self.round.calls if s.call_id == call_id)
            self._answer(step, CANCELLED_TEXT, "error")
        self._running.clear()
        self._check_done()

    def stop(self) -> None:
        """The reply stops: waiting calls never run, running ones are cancelled; no ``round_done``."""
        if self.round is None:
            return
        tool_round, self.round = self.round, None
        for task in self._running.values():
            task.cancel()
        self._running.clear()
        for step in tool_round.calls:
            if not step.done:
                self._answer(step, NOT_RUN, "stopped")

    # ---- internals -----------------------------------------------------------------------------

    def _answer(self, step: ToolStep, text: str, status: str) -> None:
        step.result, step.status = text, status
        self.step_changed.emit(step)

    def _start(self, step: ToolStep, tool: ToolInfo) -> None:
        step.status = "running"
        self.step_changed.emit(step)
        self._running[step.call_id] = asyncio.ensure_future(self._run(step, tool))

    async def _run(self, step: ToolStep, tool: ToolInfo) -> None:
        tool_round = self.round
        try:
            result = await self.tools.call(tool, step.arguments, self._config.call_timeout_s)
        except asyncio.CancelledError:
            return  # stop() or answer_now() already gave the call its result
        except Exception as exc:  # the tools thread itself failed: the model is still told
            log.exception("tool call crashed")
            self._running.pop(step.call_id, None)
            self._answer(step, f"Error: the call failed inside Nalar ({exc}).", "error")
        else:
            self._running.pop(step.call_id, None)
            if self.round is not tool_round:  # stopped meanwhile
                return
            self._answer(step, result.text, result.status)
        self._check_done()

    def _check_done(self) -> None:
        if self.round is not None and all(step.done for step in self.round.calls):
            self.round = None
            self.round_done.emit()
