"""ThinkingPause: pause a reply while it thinks, let the user edit the thinking, go on from the edit.

Qt-free state that the session drives and the window observes: ``pausing`` (the request is being
stopped), ``paused`` (the thinking pane is editable), ``off``. Resuming is Continue's mechanism with
another prefix: the engine reads the prompt, the opened think block and the edited thinking, and writes on.
"""

from __future__ import annotations

from typing import Literal

from app.core.chat.conversation import ThinkingEdit, Turn
from app.core.chat.reply import Emitter, Reply

PauseState = Literal["off", "pausing", "paused"]
CANT_PAUSE_REMOTE = ("Pause needs an engine that can go on from a given thinking: this backend asks the server "
                     "anew through its chat endpoint, so an edited thinking can't be resumed there. Use the "
                     "local engine.")
PAUSED = "Paused. Edit the thinking (change it, or add a note such as “Hint: check the units”), then Resume."
DROPPED = "Pause ended; your edit was dropped. The reply is kept as it was when paused."


class ThinkingPause:
    """``state`` and, once paused, ``original``: the thinking as the model left it."""

    def __init__(self) -> None:
        self.state: PauseState = "off"
        self.original = ""
        self.resumed = False  # the reply under way goes on from a pause (its prefix-cache share is told)
        self.changed = Emitter[PauseState]()

    @property
    def paused(self) -> bool:
        return self.state == "paused"

    @staticmethod
    def applies(reply: Reply, can_resume: bool) -> bool:
        """Pause applies while a reply streams its thinking, with no tool round yet, on an engine that resumes."""
        return can_resume and reply.state == "streaming" and reply.in_thinking and not reply.rounds

    def begin(self) -> None:
        """Pause pressed: the request is stopped; the pause takes hold when it has ended (``took_hold``)."""
        self._set("pausing")

    def took_hold(self, reason: str, turn: Turn) -> bool:
        """The paused request ended. It holds if it ended by the stop with no answer yet; a reply that ended
        by itself meanwhile (or began its answer) is simply done, and False says so."""
        if self.state != "pausing":
            return False
        if reason != "abort" or turn.answer or not turn.thinking:
            self._set("off")
            return False
        self.original = turn.thinking
        self._set("paused")
        return True

    def take_edit(self, edited: str) -> ThinkingEdit | None:
        """Resume: the pause ends; the edit to keep with the turn, or None if the text is unchanged."""
        original, self.original = self.original, ""
        self._set("off")
        return ThinkingEdit(original, edited) if edited != original else None

    def end(self) -> bool:
        """Stop, another chat or branch, or a new question: the pause ends and the edit is dropped. True if
        there was one to end."""
        if self.state == "off":
            return False
        self.original = ""
        self._set("off")
        return True

    def _set(self, state: PauseState) -> None:
        self.state = state
        self.changed.emit(state)
