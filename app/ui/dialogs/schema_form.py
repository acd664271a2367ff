"""Editors generated from a pydantic field: its type picks the widget, its limits and description come along."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from PySide6.QtWidgets import QCheckBox, QComboBox, QDoubleSpinBox, QLineEdit, QSpinBox, QWidget


def _upper_bound(field: Any) -> float | None:
    """The field's ``le`` limit, from pydantic's metadata."""
    return next((meta.le for meta in field.metadata if getattr(meta, "le", None) is not None), None)


def editor_for(field: Any, value: Any, changed: Callable[[], None]) -> QWidget:
    """A widget for ``field`` showing ``value``; ``changed`` runs on every edit."""
    annotation = field.annotation
    editor: QWidget
    if typing.get_origin(annotation) is typing.Literal:
        editor = QComboBox()
        for choice in typing.get_args(annotation):
            editor.addItem(str(choice), choice)
        editor.setCurrentIndex(max(0, editor.findData(value)))
        editor.currentIndexChanged.connect(changed)
    elif annotation is bool:
        editor = QCheckBox()
        editor.setChecked(bool(value))
        editor.toggled.connect(changed)
    elif bool in typing.get_args(annotation):  # bool | None: auto, on, off
        editor = QComboBox()
        for text, data in (("auto", None), ("on", True), ("off", False)):
            editor.addItem(text, data)
        editor.setCurrentIndex(editor.findData(value) if value is not None else 0)
        editor.currentIndexChanged.connect(changed)
    elif annotation is int:
        editor = QSpinBox()
        # The spin box itself allows a wider range, so a bad value gets an inline reason.
        editor.setRange(0, int(_upper_bound(field) or 10**9) * 4)
        editor.setValue(int(value))
        editor.valueChanged.connect(changed)
    elif annotation is float:
        editor = QDoubleSpinBox()
        editor.setDecimals(2)
        editor.setSingleStep(0.05)
        editor.setRange(0.0, float(_upper_bound(field) or 1000) * 4)
        editor.setValue(float(value))
        editor.valueChanged.connect(changed)
    else:
        editor = QLineEdit(str(value))
        editor.textChanged.connect(changed)
    return editor


def editor_value(editor: QWidget) -> Any:
    """What an editor made by ``editor_for`` holds now."""
    if isinstance(editor, QComboBox):
        return editor.currentData()
    if isinstance(editor, QCheckBox):
        return editor.isChecked()
    if isinstance(editor, (QSpinBox, QDoubleSpinBox)):
        return editor.value()
    if isinstance(editor, QLineEdit):
        return editor.text()
    return None
