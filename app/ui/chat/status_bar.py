"""EngineStatusBar: what the engine is doing, its load progress, and the local API server's address."""

from __future__ import annotations

from PySide6.QtWidgets import QProgressBar, QStatusBar, QWidget

from app.engine.events import StatusChanged
from app.ui.chat.plain_text import plain_label


class EngineStatusBar(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.status_label = plain_label("starting…")  # a remote's model id or failover reason can land here
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(200)
        self.addWidget(self.status_label, 1)
        self.addPermanentWidget(self.progress)
        self.api_label = plain_label()
        self.api_label.setObjectName("ApiServerStatus")
        self.addPermanentWidget(self.api_label)

    def show_status(self, status: StatusChanged) -> None:
        self.status_label.setText(status.message)
        self.progress.setVisible(status.state == "loading")
        if status.state == "loading":
            if status.progress is None:
                self.progress.setRange(0, 0)  # busy indicator: no fraction known
            else:
                self.progress.setRange(0, 100)
                self.progress.setValue(int(status.progress * 100))

    def show_api_url(self, url: str) -> None:
        self.api_label.setText(f"API: {url}" if url else "")
