"""The chat's knowledge chip, above the prompt beside the attached files: "Knowledge: notes, papers" (or
"Knowledge: off"), and its menu: a check per collection (on for this chat), then Manage collections…
(Knowledge…)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMenu, QToolButton

from app.ui.chat.plain_text import plain_tooltip

MANAGE = "Manage collections…"


class KnowledgeChip(QToolButton):
    """Shows the collections this chat asks over; ``chosen`` (name, on) when one is ticked, ``manage`` for the
    dialog. The menu lists the collections as they are when it opens (``names``)."""

    chosen = Signal(str, bool)
    manage = Signal()

    def __init__(self, names: Callable[[], list[str]]) -> None:
        super().__init__()
        self.setObjectName("KnowledgeChip")
        self.names = names
        self.on: tuple[str, ...] = ()
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.menu_.setObjectName("KnowledgeMenu")
        self.menu_.aboutToShow.connect(self.fill_menu)
        self.setMenu(self.menu_)
        self.show_chat(())

    def show_chat(self, on: tuple[str, ...], budget_note: str = "") -> None:
        """The chat's collections (names are the user's own, shown as plain text)."""
        self.on = on
        self.setText(f"Knowledge: {', '.join(on)}" if on else "Knowledge: off")
        tip = (f"This chat asks over {', '.join(on)}: before each question the best passages go into the prompt, "
               "and the answer cites them as [1], [2]." if on else
               "Ask over your own folders: pick collections for this chat (Knowledge… makes them).")
        self.setToolTip(plain_tooltip(f"{tip} {budget_note}".strip()))

    def fill_menu(self) -> None:
        self.menu_.clear()
        names = self.names()
        for name in dict.fromkeys([*names, *self.on]):  # a chat's collection that is gone stays, to untick
            action = self.menu_.addAction(name if name in names else f"{name} (gone)")
            action.setCheckable(True)
            action.setChecked(name in self.on)
            action.toggled.connect(lambda on, name=name: self.chosen.emit(name, on))
        if not names and not self.on:
            self.menu_.addAction("No collections yet").setEnabled(False)
        self.menu_.addSeparator()
        self.menu_.addAction(MANAGE).triggered.connect(lambda _checked=False: self.manage.emit())
