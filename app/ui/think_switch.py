"""The Think switch next to Send: each chat's own choice, shown as what the loaded model can do."""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox

from app.core.model_families import ModelFamily


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
