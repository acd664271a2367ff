"""Formulas drawn for every answer document of the process: ziamath (LaTeX → MathML → SVG in pure Python;
docs/BENCHMARKS.md has its coverage on an outside corpus) in a child process, then QtSvg into an image on the GUI
thread. One drawer, its results kept for every document."""

from __future__ import annotations

import atexit
import logging
from collections import OrderedDict

from PySide6.QtCore import QByteArray, QObject, Qt, Signal
from PySide6.QtGui import QImage, QPainter
from PySide6.QtSvg import QSvgRenderer

from app.core.chat.answer_markup import Formula
from app.core.formula_worker import MATH_PIXELS, FormulaWorker

log = logging.getLogger(__name__)
# Formulas whose image the drawer keeps for every document: more than a formula-dense reply holds (the bench's
# has ~2,500), so the thread shows a finished one without drawing any again.
DRAWN_KEPT = 4096


def svg_image(svg: bytes) -> QImage | None:
    renderer = QSvgRenderer(QByteArray(svg))
    size = renderer.defaultSize()
    if not renderer.isValid() or size.isEmpty():
        return None
    image = QImage(size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(0)
    painter = QPainter(image)
    renderer.render(painter)
    painter.end()
    return image


class FormulaDrawer(QObject):
    """Formulas drawn by ziamath in a child process (``FormulaWorker``: a slow one, seconds for a large matrix,
    never stalls the window, nor does its pure-Python layout hold the window's GIL), then by QtSvg on the GUI
    thread; ``drawn`` brings each image, or None (shown as its source)."""

    drawn = Signal(str, object)  # formula key, its QImage or None
    _arrived = Signal(str, object)  # from the worker's reader thread: formula key, SVG bytes or None

    def __init__(self) -> None:
        super().__init__()
        self.worker = FormulaWorker(self._on_answer)
        atexit.register(self.worker.close)  # formulas not yet drawn are dropped with the window
        # One drawing per formula for every document: the thread redrew each one the answer pane had just drawn.
        self._drawn: OrderedDict[str, QImage | None] = OrderedDict()  # the newest DRAWN_KEPT results
        self._pending: set[str] = set()
        self._arrived.connect(self._on_arrived, Qt.ConnectionType.QueuedConnection)

    def drawn_before(self, key: str) -> tuple[bool, QImage | None]:
        """Whether ``key`` was drawn already, and its image (None: ziamath can't draw it)."""
        return key in self._drawn, self._drawn.get(key)

    def request(self, formula: Formula) -> None:
        """``drawn`` follows for ``formula``: at once when it was drawn already, else once drawn."""
        key = formula.key
        if key in self._drawn:
            self.drawn.emit(key, self._drawn.get(key))
        elif key not in self._pending:
            self._pending.add(key)
            self.worker.draw(key, formula.source, formula.display, MATH_PIXELS)

    def _on_answer(self, key: str, svg: bytes | None, reason: str) -> None:  # on the worker's reader thread
        if svg is None:
            log.info("formula shown as its source (%s): %s", reason, key)
        try:
            self._arrived.emit(key, svg)
        except RuntimeError:  # the drawer was deleted with the application
            log.debug("formula drawn after the window closed: dropped")

    def _on_arrived(self, key: str, svg: bytes | None) -> None:
        self._drawn[key] = image = svg_image(svg) if svg else None
        self._pending.discard(key)
        while len(self._drawn) > DRAWN_KEPT:
            self._drawn.popitem(last=False)
        self.drawn.emit(key, image)


_DRAWER: FormulaDrawer | None = None


def formula_drawer() -> FormulaDrawer:
    global _DRAWER
    if _DRAWER is None:
        _DRAWER = FormulaDrawer()
    return _DRAWER


def close_formula_drawer() -> None:
    """The drawer's child ended now, as at the app's exit; the next formula starts a new one."""
    if _DRAWER is not None:
        _DRAWER.worker.close()
