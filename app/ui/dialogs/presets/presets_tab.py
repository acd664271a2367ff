"""Settings → Presets: the list of presets (add, rename, delete, make default) and the chosen one's values,
in editors generated from the schema (app.core.settings.settings.PresetValues), as the other tabs are."""

from __future__ import annotations

import typing
from types import SimpleNamespace
from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.settings.settings import Preset, PresetsConfig, PresetValues, SamplingConfig
from app.ui.chat.plain_text import plain_label
from app.ui.dialogs.schema_form import editor_for, editor_value

LABELS = {"top_p": "Top-p", "top_k": "Top-k", "max_tokens": "Max answer tokens",
          "think_budget": "Think budget (tokens)", "thinking": "Think", "tools": "Tools",
          "knowledge": "Knowledge collections"}


def names_text(names: tuple[str, ...] | list[str]) -> str:
    """A preset's knowledge collections as its line edit shows them: "notes, papers"."""
    return ", ".join(names)


def names_from(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))


class PresetsTab(QWidget):
    """Edits a copy of the presets; ``value()`` is the validated result (ValueError says what is wrong)."""

    changed = Signal()

    def __init__(self, config: PresetsConfig, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.presets: list[dict[str, Any]] = [preset.model_dump() for preset in config.presets]
        self.default = config.default
        self.list = QListWidget()
        self.list.setObjectName("PresetList")
        self.add_button, self.delete_button = QPushButton("Add"), QPushButton("Delete")
        self.default_button = QPushButton("Make default")
        self.default_button.setToolTip("New chats take the default preset")
        self.name = QLineEdit()
        self.name.setObjectName("preset.name")
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setObjectName("preset.system_prompt")
        self.system_prompt.setToolTip(PresetValues.model_fields["system_prompt"].description or "")
        self.editors: dict[str, QWidget] = {}
        self.own: dict[str, QCheckBox] = {}  # numbers: checked, the preset sets it; unchecked: Settings' (None)
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("System prompt", self.system_prompt)
        for field_name, field in PresetValues.model_fields.items():
            if field_name != "system_prompt":
                form.addRow(LABELS.get(field_name, field_name.replace("_", " ").capitalize()),
                            self._editor(field_name, field))
        self.problem = plain_label(word_wrap=True)
        self.problem.setStyleSheet("color: #b00020;")
        self.note = plain_label("A chat keeps the values of the preset it took: editing a preset here changes new "
                                "choices, not the chats that already have it.", word_wrap=True)
        buttons = QHBoxLayout()
        for button in (self.add_button, self.delete_button, self.default_button):
            buttons.addWidget(button)
        left = QVBoxLayout()
        left.addWidget(self.list, 1)
        left.addLayout(buttons)
        right = QVBoxLayout()
        right.addLayout(form)
        right.addWidget(self.problem)
        right.addStretch(1)
        body = QHBoxLayout()
        body.addLayout(left, 1)
        body.addLayout(right, 2)
        layout = QVBoxLayout(self)
        layout.addLayout(body, 1)
        layout.addWidget(self.note)
        self.name.textEdited.connect(lambda _text: self._edited())
        self.system_prompt.textChanged.connect(self._edited)
        self.add_button.clicked.connect(self.add)
        self.delete_button.clicked.connect(self.delete)
        self.default_button.clicked.connect(self.make_default)
        self.list.currentRowChanged.connect(self._show)
        self._loading = False
        self._fill(max(0, next((n for n, p in enumerate(self.presets) if p["name"] == self.default), 0)))

    def _editor(self, field_name: str, field: Any) -> QWidget:
        """The schema's editor (bool | None: auto/on/off); a number | None gets its own "set here" box."""
        number = next((t for t in typing.get_args(field.annotation) if t in (int, float)), None)
        editor = editor_for(SimpleNamespace(annotation=number, metadata=field.metadata) if number else field,
                            SamplingConfig.model_fields[field_name].default if number else None, self._edited)
        editor.setObjectName(f"preset.{field_name}")
        editor.setToolTip(field.description or "")
        self.editors[field_name] = editor
        if number is None:
            return editor
        own = QCheckBox("set here")
        own.setObjectName(f"preset.{field_name}.own")
        own.setToolTip("Unchecked: Settings → Sampling's value (the model card's, once a model is chosen)")
        own.toggled.connect(editor.setEnabled)
        own.toggled.connect(lambda _on: self._edited())
        self.own[field_name] = own
        cell = QWidget()
        row = QHBoxLayout(cell)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(own)
        row.addWidget(editor, 1)
        return cell

    @property
    def row(self) -> int:
        return self.list.currentRow()

    def add(self) -> None:
        """A new preset, a copy of the one chosen, under a free name."""
        names = {p["name"] for p in self.presets}
        name = next(f"New preset {n}" for n in range(1, len(names) + 2) if f"New preset {n}" not in names)
        self.presets.append({**self.presets[max(0, self.row)], "name": name})
        self._fill(len(self.presets) - 1)
        self.changed.emit()

    def delete(self) -> None:
        """The chosen preset goes (the last one stays); the default moves to the first if it was this one."""
        if len(self.presets) <= 1 or self.row < 0:
            return
        gone = self.presets.pop(self.row)
        if gone["name"] == self.default:
            self.default = self.presets[0]["name"]
        self._fill(min(self.row, len(self.presets) - 1))
        self.changed.emit()

    def make_default(self) -> None:
        if self.row >= 0:
            self.default = self.presets[self.row]["name"]
            self._fill(self.row)
            self.changed.emit()

    def value(self) -> PresetsConfig:
        try:
            config = PresetsConfig(presets=tuple(Preset.model_validate(p) for p in self.presets), default=self.default)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"Presets: {where + ': ' if where else ''}{first['msg']}") from exc
        return config

    def _fill(self, row: int) -> None:
        """The list again (names, the default marked), ``row`` chosen."""
        self.list.blockSignals(True)
        self.list.clear()
        for preset in self.presets:
            self.list.addItem(preset["name"] + (" (default)" if preset["name"] == self.default else ""))
        self.list.blockSignals(False)
        self.list.setCurrentRow(row)
        self._show(row)

    def _show(self, row: int) -> None:
        if not 0 <= row < len(self.presets):
            return
        preset = self.presets[row]
        self._loading = True
        self.name.setText(preset["name"])
        self.system_prompt.setPlainText(preset["system_prompt"])
        for field_name, editor in self.editors.items():
            value = preset[field_name]
            if (own := self.own.get(field_name)) is not None:
                own.setChecked(value is not None)
                editor.setEnabled(value is not None)
            if isinstance(value, (tuple, list)):  # the knowledge collections' names, in a line edit
                editor.blockSignals(True)
                editor.setText(names_text(value))  # type: ignore[attr-defined]
                editor.blockSignals(False)
            set_value(editor, value)
        self._loading = False

    def _edited(self) -> None:
        """An editor changed: the chosen preset takes its value (a renamed default stays the default)."""
        if self._loading or not 0 <= self.row < len(self.presets):
            return
        preset = self.presets[self.row]
        if preset["name"] == self.default:
            self.default = self.name.text()
        preset["name"] = self.name.text()
        preset["system_prompt"] = self.system_prompt.toPlainText()
        for field_name, editor in self.editors.items():
            own = self.own.get(field_name)
            value = editor_value(editor) if own is None or own.isChecked() else None
            preset[field_name] = names_from(value or "") if field_name == "knowledge" else value
        item = self.list.item(self.row)
        if item is not None:
            item.setText(preset["name"] + (" (default)" if preset["name"] == self.default else ""))
        try:
            self.value()
            self.problem.setText("")
        except ValueError as exc:
            self.problem.setText(str(exc))
        self.changed.emit()


def set_value(editor: QWidget, value: Any) -> None:
    """Show ``value`` in an editor made by ``editor_for`` without it reporting an edit (None: a number's editor
    keeps what it shows; auto/on/off shows auto)."""
    editor.blockSignals(True)
    if isinstance(editor, QComboBox):
        editor.setCurrentIndex(max(0, editor.findData(value)))
    elif isinstance(editor, QSpinBox) and value is not None:
        editor.setValue(int(value))
    elif isinstance(editor, QDoubleSpinBox) and value is not None:
        editor.setValue(float(value))
    editor.blockSignals(False)
