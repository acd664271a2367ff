"""The Think and Tools switches next to Send: each chat's own choices, shown as what the model and the
configured tool servers can do."""

from __future__ import annotations

from typing import get_args

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QComboBox

from app.core.models.model_families import ModelFamily
from app.core.settings.settings import ReasoningEffort


class ThinkSwitch(QCheckBox):
    """Checked: replies think first. Models that always think show it checked and locked."""

    def __init__(self) -> None:
        super().__init__("Think")
        self._chat_choice = True

    def show_chat(self, thinking: bool) -> None:
        """The chat's stored choice, without emitting ``toggled``."""
        self._chat_choice = thinking
        self.blockSignals(True)
        self.setChecked(thinking or not self.isEnabled())
        self.blockSignals(False)

    def show_family(self, family: ModelFamily) -> None:
        always = family.thinking == "always"
        self.setEnabled(not always)
        self.setToolTip({
            "always": f"{family.name} always thinks before it answers.",
            "hybrid": f"{family.name}: thinking on or off through its chat template (enable_thinking).",
            "plain": "Nalar's reasoning mode: the model is asked to think in <think> tags first.",
        }[family.thinking])
        self.show_chat(self._chat_choice)


class ToolsSwitch(QCheckBox):
    """Checked: this chat offers the model the tools switched on in Settings → Tools (each call still asks)."""

    def __init__(self) -> None:
        super().__init__("Tools")
        self.show_tools(0)

    def show_chat(self, tools: bool) -> None:
        """The chat's stored choice, without emitting ``toggled``."""
        self.blockSignals(True)
        self.setChecked(tools)
        self.blockSignals(False)

    def show_tools(self, count: int) -> None:
        self.setToolTip(f"Offer the model {count} tool(s) from your MCP servers; each call asks before it runs."
                        if count else "No tools yet: add an MCP server in Settings → Tools.")


class EffortChoice(QComboBox):
    """gpt-oss's reasoning effort (Harmony's low / medium / high) beside its locked Think switch; shown for
    that family only. ``chosen`` carries the user's pick (the setting, saved like any sampling setting)."""

    chosen = Signal(str)

    def __init__(self) -> None:
        super().__init__()
        for level in get_args(ReasoningEffort):
            self.addItem(f"Effort: {level}", level)
        self.setToolTip("gpt-oss always thinks; this sets how long (Harmony's 'Reasoning: low, medium or high').")
        self.setVisible(False)
        self.activated.connect(lambda index: self.chosen.emit(self.itemData(index)))

    def show_family(self, family: ModelFamily, effort: ReasoningEffort) -> None:
        self.setVisible(family.parser == "openai_gptoss")
        self.blockSignals(True)
        self.setCurrentIndex(self.findData(effort))
        self.blockSignals(False)
