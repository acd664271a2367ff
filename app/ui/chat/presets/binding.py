"""ChatSettingsBinding: the chat shown's preset and think budget in the controls beside Think, the user's picks
stored with the chat, and the thinking pane counting against the chat's budget."""

from __future__ import annotations

from PySide6.QtCore import QObject

from app.core.chat.chat_settings import ChatSettings, chat_budget, effective
from app.core.models.model_families import ModelFamily, model_family
from app.core.settings.settings import MAX_THINK_BUDGET, THINK_BUDGET_LEVELS, budget_effort
from app.ui.chat.panes import ThinkingPane
from app.ui.chat.reply_controls import ReplyControls
from app.ui.controllers.chat_session import ChatSession
from app.ui.controllers.engine_controller import EngineController


def no_system_note(family: ModelFamily, chat: ChatSettings) -> str:
    """What the window says when the loaded model's card wants no system prompt and the chat has one."""
    if family.system_prompt or not chat.values.system_prompt.strip():
        return ""
    return f"{family.name}: no system prompt (its card); the preset's text starts your first question."


class ChatSettingsBinding(QObject):
    """Keeps the preset and budget controls on the chat shown; a pick is saved with that chat at once."""

    def __init__(self, controls: ReplyControls, session: ChatSession, controller: EngineController,
                 thinking_pane: ThinkingPane) -> None:
        super().__init__(session)
        self.controls, self.session, self.controller, self.pane = controls, session, controller, thinking_pane
        controls.preset_choice.chosen.connect(self.choose_preset)
        controls.budget_choice.chosen.connect(self.choose_budget)
        # gpt-oss: its effort and the chat's budget are one choice (Low, Medium, High), kept with the chat
        controls.effort_choice.chosen.connect(lambda effort: self.choose_budget(THINK_BUDGET_LEVELS[effort]))
        session.store.current_changed.connect(lambda _row: self.refresh())
        session.reply_started.connect(lambda _conversation: self.refresh())
        session.state_changed.connect(self.refresh)  # no preset change under a reply
        controller.settings_changed.connect(lambda _before, _after: self.refresh())
        controller.bridge.engine_ready.connect(lambda _ready: self.refresh())

    def choose_preset(self, name: str) -> None:
        """The chat takes a copy of the preset's values, and its Think and Tools defaults."""
        preset = self.controller.settings.presets.preset(name)
        if preset is None or self.session.streaming:
            self.refresh()
            return
        settings = self.controller.settings
        thinking = settings.sampling.thinking if preset.thinking is None else preset.thinking
        tools = settings.tools.enabled if preset.tools is None else preset.tools
        self.session.store.set_chat_settings(ChatSettings.of(preset), thinking=thinking, tools=tools)
        conversation = self.session.conversation
        self.controls.think_switch.show_chat(conversation.thinking)
        self.controls.tools_switch.show_chat(conversation.tools)
        self.refresh()

    def choose_budget(self, budget: int) -> None:
        chat = effective(self.session.conversation.settings, self.controller.settings.presets)
        self.session.store.set_chat_settings(chat.with_budget(budget))
        self.refresh()

    def refresh(self) -> None:
        conversation = self.session.conversation
        presets = self.controller.settings.presets
        chat = effective(conversation.settings, presets)
        self.controls.preset_choice.show_chat(presets, conversation.settings)
        self.controls.preset_choice.setEnabled(not self.session.streaming)
        budget = chat_budget(conversation.settings, self.controller.settings.sampling, presets)
        self.controls.budget_choice.show_budget(budget)
        if (effort := budget_effort(budget)) is not None:
            effort_choice = self.controls.effort_choice
            effort_choice.blockSignals(True)
            effort_choice.setCurrentIndex(effort_choice.findData(effort))
            effort_choice.blockSignals(False)
        ready = self.controller.bridge.ready
        note = no_system_note(model_family(ready.model if ready else ""), chat)
        self.controls.preset_note.setText(note)
        self.controls.preset_note.setVisible(bool(note))
        self.pane.set_budget(budget if 0 < budget < MAX_THINK_BUDGET else None)
