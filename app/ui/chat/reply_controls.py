"""The row under the prompt: Send, the Think and Tools switches, Stop, Pause and Resume, Answer now,
Regenerate and Copy answer, enabled by what the engine and the reply allow."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

from app.core.models.model_families import ModelFamily
from app.core.settings.settings import ReasoningEffort
from app.ui.chat.plain_text import plain_label
from app.ui.chat.presets.controls import BudgetChoice, PresetChoice, system_prompt_note
from app.ui.chat.think_switch import EffortChoice, ThinkSwitch, ToolsSwitch


class ReplyControls(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.send_button = QPushButton("Send")
        self.think_switch = ThinkSwitch()
        self.effort_choice = EffortChoice()
        self.preset_choice = PresetChoice()  # the chat's preset and think budget (app/ui/chat/presets)
        self.budget_choice = BudgetChoice()
        self.preset_note = system_prompt_note()
        self.tools_switch = ToolsSwitch()
        self.stop_button = QPushButton("Stop")
        self.pause_button = QPushButton("Pause")
        self.resume_button = QPushButton("Resume")
        self.resume_button.setToolTip("Go on from the thinking as you edited it")
        self.answer_now_button = QPushButton("Answer now")
        self.answer_now_button.setToolTip("End thinking here and write the answer")
        self.regenerate_button = QPushButton("Regenerate")
        self.continue_button = QPushButton("Continue")
        self.continue_button.setToolTip("The reply stopped at its token limit: go on from where it stopped")
        self.copy_button = QPushButton("Copy answer")
        self.edit_label = plain_label()  # shown while the prompt holds an earlier question being edited
        self.edit_label.setObjectName("EditLabel")
        self.cancel_edit_button = QPushButton("Cancel edit")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for button in (self.send_button, self.think_switch, self.effort_choice, self.budget_choice, self.preset_choice,
                       self.preset_note, self.tools_switch, self.stop_button, self.pause_button, self.resume_button,
                       self.answer_now_button, self.regenerate_button, self.continue_button, self.copy_button):
            layout.addWidget(button)
        layout.addStretch(1)
        layout.addWidget(self.edit_label)
        layout.addWidget(self.cancel_edit_button)
        self.show_editing(None)

    def show_editing(self, index: int | None) -> None:
        """Which question the prompt edits (its number on the branch shown), or None: a new question."""
        self.edit_label.setText("" if index is None else
                                f"Editing question {index + 1}: Send makes a new branch there; the old one stays.")
        self.edit_label.setVisible(index is not None)
        self.cancel_edit_button.setVisible(index is not None)

    def show_family(self, family: ModelFamily, effort: ReasoningEffort) -> None:
        """The loaded model's family: how the Think switch behaves, and gpt-oss's effort beside it."""
        self.think_switch.show_family(family)
        self.effort_choice.show_family(family, effort)

    def set_state(self, *, engine_ready: bool, streaming: bool, has_turns: bool, has_answer: bool,
                  awaiting_tools: bool = False, can_continue: bool = False, can_pause: bool = False,
                  paused: bool = False, pause_reason: str = "") -> None:
        """``awaiting_tools``: the reply waits on a tool call, which Regenerate may drop; ``can_continue``: the
        shown reply ended at max tokens; ``can_pause``: the reply is thinking; ``paused``: its thinking waits
        for the user's edit; ``pause_reason``: why this backend can't pause ("" where it can)."""
        self.send_button.setEnabled(engine_ready and not streaming)
        self.stop_button.setEnabled(streaming)
        self.answer_now_button.setEnabled(streaming)
        self.regenerate_button.setEnabled(engine_ready and (not streaming or awaiting_tools) and has_turns)
        self.copy_button.setEnabled(has_answer)
        self.continue_button.setVisible(can_continue)
        self.continue_button.setEnabled(engine_ready and not streaming and can_continue)
        self.pause_button.setVisible(not paused)
        self.pause_button.setEnabled(streaming and can_pause and not pause_reason)
        self.pause_button.setToolTip(pause_reason or "Stop the thinking here to edit it, then Resume")
        self.resume_button.setVisible(paused)
        self.resume_button.setEnabled(engine_ready and paused)
        self.stop_button.setEnabled(streaming or paused)
