"""Discover: the search box, its sort and filters, the results with this machine's verdict per file set, and
Download. With the box empty or the hub unreachable, the list is Nalar's catalog planned for this machine (the
offline list), with the reason."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.core.hub.verdicts import FitVerdict
from app.ui.chat.plain_text import plain_label
from app.ui.model_browser.hub_search import HubSearch
from app.ui.model_browser.search_state import FORMATS, Query, ResultRow, SearchState, Sort, kept
from app.ui.model_browser.text_list import TextListView, TextRow
from app.ui.model_browser.texts import row_text, verdict_line


class DiscoverTab(QWidget):
    """``download_requested(repo_id, file set label or "")`` when the user asks for a result's files."""

    download_requested = Signal(str, str)

    def __init__(self, search: HubSearch, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.search = search
        self.state: SearchState = search.state
        self.catalog: list[ResultRow] = []  # the offline list, once this machine is planned
        self._build()
        search.changed.connect(self.refresh)
        self.refresh()

    def _build(self) -> None:
        self.search_box = QLineEdit()
        self.search_box.setPlaceholderText("Search the Hugging Face hub: qwen3, deepseek r1, phi-4 reasoning…")
        self.search_box.setClearButtonEnabled(True)
        self.search_box.textEdited.connect(lambda _text: self.search.request(self.query()))
        self.search_box.returnPressed.connect(self._search_now)
        self.sort_choice = QComboBox()
        self.sort_choice.addItem("Most downloaded", "downloads")
        self.sort_choice.addItem("Trending", "trending")
        self.sort_choice.currentIndexChanged.connect(lambda _i: self._search_now())
        self.only_fits = QCheckBox("Only what fits")
        self.only_fits.setToolTip("Hide results with no file set that fits this machine")
        self.only_fits.toggled.connect(self.set_only_fits)
        self.only_reasoning = QCheckBox("Reasoning families only")
        self.only_reasoning.setToolTip("Only families that think: hybrid (Think switch) or always")
        self.only_reasoning.toggled.connect(lambda _on: self._search_now())
        self.format_choice = QComboBox()
        self.format_choice.addItems(list(FORMATS))
        self.format_choice.setToolTip("Only results with a file set in this format (GGUF: listed, Nalar can't load it)")
        self.format_choice.currentTextChanged.connect(self.set_format)
        self.status_label = plain_label(word_wrap=True)  # quotes the hub's errors
        self.results = TextListView()
        self.results.selectionModel().currentChanged.connect(lambda *_: self._show_file_sets())
        self.file_set_choice = QComboBox()
        self.file_set_choice.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.file_set_choice.setMinimumContentsLength(40)
        self.file_set_choice.activated.connect(lambda _i: self._show_file_sets())
        self.download_button = QPushButton("Download")
        self.download_button.setToolTip("Add the chosen files to the download queue (Downloads tab)")
        self.download_button.clicked.connect(self.download_selected)
        top = QHBoxLayout()
        top.addWidget(self.search_box, 1)
        top.addWidget(self.sort_choice)
        top.addWidget(self.only_fits)
        top.addWidget(self.only_reasoning)
        top.addWidget(self.format_choice)
        bottom = QHBoxLayout()
        bottom.addWidget(self.file_set_choice, 1)
        bottom.addWidget(self.download_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.status_label)
        layout.addWidget(self.results, 1)
        layout.addLayout(bottom)

    def query(self) -> Query:
        sort: Sort = "trending" if self.sort_choice.currentData() == "trending" else "downloads"
        return Query(self.search_box.text(), sort, self.only_reasoning.isChecked())

    def _search_now(self) -> None:
        self.search.request(self.query())
        self.search.start_now()

    def set_only_fits(self, on: bool) -> None:
        self.state.only_fits = on
        self.refresh()

    def set_format(self, fmt: str) -> None:
        """Refilters what is there (no new search): the format is matched on the file sets already known."""
        self.state.format = fmt
        self.refresh()

    def set_catalog(self, rows: list[ResultRow]) -> None:
        self.catalog = rows
        self.refresh()

    def shown_rows(self) -> list[ResultRow]:
        if self.state.offline_list:
            return [row for row in self.catalog if kept(row, self.state.only_fits, self.state.format)]
        return self.state.visible()

    def refresh(self) -> None:
        """The state into the list and the status line (on the GUI thread, once per batch of arrivals)."""
        rows = self.shown_rows()
        self.results.rows.show([TextRow(row.model.repo_id, row_text(row)) for row in rows])
        status = self.state.status()
        if self.state.offline_list and self.state.problem:
            status += " The list below is Nalar's catalog; a model folder you have works too (Library → Add folder…)."
        self.status_label.setText(status)
        self._show_file_sets()

    def selected_row(self) -> ResultRow | None:
        key = self.results.current_key()
        return next((row for row in self.shown_rows() if row.model.repo_id == key), None)

    def _show_file_sets(self) -> None:
        """The selected result's file sets, each with its verdict; the one that fits best chosen."""
        row = self.selected_row()
        verdicts: tuple[FitVerdict, ...] = (row.verdicts or ()) if row else ()
        wanted = [(verdict_line(v), v.file_set.label, v.file_set.loadable) for v in verdicts]
        if row is not None and not wanted:
            wanted = [("the repo's default files (no verdict yet)", "", True)]
        current = self.file_set_choice.currentData()
        if [(self.file_set_choice.itemText(i), self.file_set_choice.itemData(i))
                for i in range(self.file_set_choice.count())] != [(text, label) for text, label, _ in wanted]:
            self.file_set_choice.clear()
            for text, label, _loadable in wanted:
                self.file_set_choice.addItem(text, label)
            best = next((i for i, v in enumerate(verdicts) if v.file_set.loadable and v.fits == "fits"),
                        next((i for i, v in enumerate(verdicts) if v.file_set.loadable and v.fits != "no"), 0))
            labels = [label for _, label, _ in wanted]
            self.file_set_choice.setCurrentIndex(labels.index(current) if current in labels else best)
        loadable = bool(wanted) and wanted[max(self.file_set_choice.currentIndex(), 0)][2]
        self.download_button.setEnabled(row is not None and loadable)

    def download_selected(self) -> None:
        row = self.selected_row()
        if row is not None:
            self.download_requested.emit(row.model.repo_id, self.file_set_choice.currentData() or "")
