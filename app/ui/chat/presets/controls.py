"""The preset and think-budget choices beside the Think switch, and the note for models that read no system
prompt. Views only: ``ChatSettingsBinding`` shows the chat's values in them and stores the user's picks."""

from __future__ import annotations

import re

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QLabel

from app.core.chat.chat_settings import ChatSettings, budget_label
from app.core.settings.settings import MAX_THINK_BUDGET, THINK_BUDGET_LEVELS, PresetsConfig
from app.ui.chat.plain_text import plain_label

BUDGETS: tuple[int, ...] = (*THINK_BUDGET_LEVELS.values(), MAX_THINK_BUDGET)


class PresetChoice(QComboBox):
    """The chat's preset. A chat keeps its own copy: one whose preset was since renamed, deleted or edited
    shows "(this chat's)", and picking a preset copies its values now."""

    chosen = Signal(str)  # a preset's name

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("PresetChoice")
        self.setToolTip("This chat's preset: system prompt, sampling, think budget, Think and Tools "
                        "(Settings → Presets edits them; a chat keeps the values it took)")
        self.activated.connect(self._on_activated)

    def show_chat(self, presets: PresetsConfig, chat: ChatSettings | None) -> None:
        """The presets, the chat's own shown as chosen; ``chat`` None: the chat follows the default preset."""
        self.blockSignals(True)
        self.clear()
        for preset in presets.presets:
            self.addItem(preset.name, preset.name)
        name = chat.preset if chat is not None else presets.default
        own = presets.preset(name)
        if chat is not None and (own is None or ChatSettings.of(own) != chat):
            self.addItem(f"{name or 'Custom'} (this chat's)", None)
            self.setCurrentIndex(self.count() - 1)
        else:
            self.setCurrentIndex(max(0, self.findData(name)))
        self.blockSignals(False)

    def _on_activated(self, index: int) -> None:
        if (name := self.itemData(index)) is not None:
            self.chosen.emit(name)


def parse_budget(text: str) -> int | None:
    """A budget typed in the box: "37", "2,048", "unlimited"; None when it is no budget."""
    if text.strip().lower().startswith("unlimited"):
        return MAX_THINK_BUDGET
    digits = re.sub(r"[,\s_]", "", text.split("(")[-1].rstrip(")").replace("tokens", ""))
    return min(int(digits), MAX_THINK_BUDGET) if digits.isdigit() else None


class BudgetChoice(QComboBox):
    """The chat's think budget: Low, Medium, High, Unlimited (up to the context), or a number typed in."""

    chosen = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("BudgetChoice")
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        for tokens in BUDGETS:
            self.addItem(budget_label(tokens), tokens)
        self.setToolTip("Most thinking tokens before the answer is asked for (this chat's; a number may be typed). "
                        "gpt-oss: Low, Medium and High set its reasoning effort.")
        self.shown = 0
        self.activated.connect(lambda index: self._pick(self.itemData(index)))
        line = self.lineEdit()
        assert line is not None
        line.editingFinished.connect(lambda: self._pick(parse_budget(self.currentText())))

    def show_budget(self, budget: int) -> None:
        self.shown = budget
        self.blockSignals(True)
        index = self.findData(budget)
        if index >= 0:
            self.setCurrentIndex(index)
        self.setEditText(budget_label(budget))
        self.blockSignals(False)

    def _pick(self, budget: int | None) -> None:
        if budget is None:
            self.setEditText(budget_label(self.shown))  # not a number: the chat's budget stays
        elif budget != self.shown:
            self.show_budget(budget)
            self.chosen.emit(budget)


def system_prompt_note() -> QLabel:
    """The note beside the preset choice (hidden unless the loaded model reads no system prompt)."""
    label = plain_label(word_wrap=True)
    label.setObjectName("PresetNote")
    label.setStyleSheet("color: #8a5300;")
    label.hide()
    return label
