"""WelcomeDialog: choose the model on first run (and later from Engine → Choose model…).

With an NVIDIA GPU it lists the catalog planned against the detected VRAM, recommends the largest
model that fits, downloads it from the hub with progress, cancel and resume. Without one it lists small
reasoning models sized by RAM, with a speed from the measured memory bandwidth (app.core.models.cpu_catalog).
Offline, or when nothing fits, it offers the embedded model and says why. Any local model folder works too.

The hub check and the download run through the one runner (app.ui.controllers.operations): their outcome
lands on the GUI thread, and is dropped if the dialog is gone. The download's progress crosses through this
dialog's ``download_progress`` signal, which Qt queues.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.core.models.cpu_catalog import (
    CpuRecommendation,
    best_cpu,
    cpu_recommendations,
    downloaded_max_len,
    host_bandwidth,
    ram_total_bytes,
)
from app.core.models.hub_download import (
    DownloadCancelled,
    DownloadError,
    DownloadProgress,
    HubDownload,
    check_reachable,
    describe,
    format_bytes,
    partial_bytes,
)
from app.core.models.model_catalog import Recommendation, best, recommendations, validate_model_folder
from app.core.models.planner import GIB
from app.core.settings.settings import is_fp8
from app.engine.machine.capability import HardwareProbe, recommended_kv_dtype
from app.engine.machine.gpu_start import held_by_others
from app.ui.controllers.operations import Operation, run_blocking

log = logging.getLogger(__name__)
EMBEDDED = "embedded"
ROLE = Qt.ItemDataRole.UserRole


class WelcomeDialog(QDialog):
    """After ``accepted``, :attr:`engine_update` holds the EngineConfig fields to change."""

    reachability_checked = Signal(object)  # None, or why the hub can't be reached
    download_progress = Signal(object)  # DownloadProgress
    download_finished = Signal(object)  # Path of the finished model folder
    download_failed = Signal(str)
    download_cancelled = Signal()
    more_models = Signal()  # "More models…": the window hands over to the model browser (hub search, library)

    def __init__(self, probe: HardwareProbe, parent: QWidget | None = None, *,
                 check_hub: bool = True) -> None:
        super().__init__(parent)
        self.setWindowTitle("Welcome to Nalar")
        self.setMinimumWidth(640)
        self.probe = probe
        self.kv_cache_dtype = recommended_kv_dtype(probe)
        self.engine_update: dict[str, Any] = {}
        self.download: HubDownload | None = None
        self._worker: Operation[Path] | None = None
        self._build()
        self._recommendations: list[Recommendation | CpuRecommendation] = _fill(self)
        self.reachability_checked.connect(lambda reason: _show_offline(self, reason))
        self.download_progress.connect(self._on_progress)
        self.download_finished.connect(self._on_finished)
        self.download_failed.connect(self._on_failed)
        self.download_cancelled.connect(self._on_cancelled)
        if check_hub and self._recommendations:
            run_blocking("Checking the model hub", check_reachable, parent=self).success(
                self.reachability_checked.emit)

    # ---- building ----------------------------------------------------------------------------------

    def _build(self) -> None:
        layout = QVBoxLayout(self)
        title = QLabel("<b>Choose the model Nalar thinks with</b>")
        self.hardware_label = QLabel()
        self.reason_label = QLabel()
        self.reason_label.setWordWrap(True)
        self.model_list = QListWidget()
        self.model_list.setWordWrap(True)
        self.model_list.setSpacing(4)
        self.model_list.currentItemChanged.connect(self._on_selection)
        self.model_list.itemDoubleClicked.connect(lambda _item: self.use_selected())
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.hide()
        self.progress_label = QLabel()
        self.progress_label.hide()
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #b00020;")
        self.error_label.hide()
        buttons = QHBoxLayout()
        self.local_button = QPushButton("Local folder…")
        self.local_button.clicked.connect(lambda: self.choose_local_folder())
        self.cancel_button = QPushButton("Cancel download")
        self.cancel_button.clicked.connect(self.cancel_download)
        self.cancel_button.hide()
        self.close_button = QPushButton("Later")
        self.close_button.setToolTip("Start with the embedded model; Engine → Choose model… brings this back.")
        self.close_button.clicked.connect(self.reject)
        self.use_button = QPushButton("Use")
        self.use_button.setDefault(True)
        self.use_button.clicked.connect(self.use_selected)
        buttons.addWidget(self.local_button)
        self.more_button = _more_button(self, buttons)
        buttons.addStretch(1)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.close_button)
        buttons.addWidget(self.use_button)
        for widget in (title, self.hardware_label, self.reason_label, self.model_list, self.progress,
                       self.progress_label, self.error_label):
            layout.addWidget(widget)
        layout.addLayout(buttons)

    # ---- state ---------------------------------------------------------------------------------------

    def item_for(self, key: str) -> QListWidgetItem:
        return next(self.model_list.item(i) for i in range(self.model_list.count())
                    if self.model_list.item(i).data(ROLE) == key)

    def recommendation(self, repo_id: str) -> Recommendation | CpuRecommendation:
        return next(r for r in self._recommendations if r.model.repo_id == repo_id)

    @property
    def downloading(self) -> bool:
        return self._worker is not None and self._worker.running

    def _on_selection(self, current: QListWidgetItem | None, _previous: QListWidgetItem | None = None) -> None:
        key = current.data(ROLE) if current else None
        self.use_button.setText("Use" if key in (None, EMBEDDED) else "Download and use")
        self.use_button.setEnabled(current is not None and not self.downloading)

    def _show_error(self, text: str) -> None:
        self.error_label.setText(text)
        self.error_label.setVisible(bool(text))

    # ---- choices -------------------------------------------------------------------------------------

    def use_selected(self) -> None:
        item = self.model_list.currentItem()
        if item is None or self.downloading or not item.flags() & Qt.ItemFlag.ItemIsEnabled:
            return
        key = item.data(ROLE)
        if key == EMBEDDED:
            self.engine_update = {"model": ""}
            self.accept()
        else:
            self.start_download(key)

    def choose_local_folder(self, folder: str | Path | None = None) -> bool:
        """``folder`` skips the file picker (tests, and a path pasted elsewhere). True when accepted."""
        if folder is None:
            folder = QFileDialog.getExistingDirectory(self, "Choose a model folder (it holds config.json)")
            if not folder:
                return False
        path = Path(folder).expanduser()
        problem = validate_model_folder(path)
        if problem:
            self._show_error(problem)
            return False
        self.engine_update = {"model": str(path)}
        self.accept()
        return True

    # ---- download ------------------------------------------------------------------------------------

    def start_download(self, repo_id: str) -> None:
        self._show_error("")
        self.download = HubDownload(repo_id, on_progress=lambda p: _emit(self.download_progress, p))
        self.progress.setValue(0)
        self.progress.show()
        self.progress_label.setText(f"Connecting to {self.download.endpoint}…")
        self.progress_label.show()
        self.cancel_button.show()
        self.use_button.setEnabled(False)
        self.local_button.setEnabled(False)
        self._worker = run_blocking(f"Downloading {repo_id}", self.download.run, parent=self).success(
            self.download_finished.emit).failure(self._download_failed)

    def _download_failed(self, exc: Exception) -> None:
        if isinstance(exc, DownloadCancelled):
            self.download_cancelled.emit()
        elif isinstance(exc, DownloadError):
            self.download_failed.emit(str(exc))
        else:  # a bug (the runner logged it): still tell the user something useful
            self.download_failed.emit(f"The download failed unexpectedly ({type(exc).__name__}: {exc}). "
                                      "Retry; the log folder has the details.")

    def cancel_download(self) -> None:
        if self.download is not None:
            self.download.cancel()
            self.cancel_button.setEnabled(False)

    def _on_progress(self, progress: DownloadProgress) -> None:
        self.progress.setValue(int(progress.fraction * 1000))
        self.progress_label.setText(f"{progress.filename} ({progress.files_done + 1}/{progress.files_total}) · "
                                    f"{describe(progress)}")

    def _download_ended(self) -> None:
        if self._worker is not None:
            self._worker.wait(10)
        self._worker = None
        self.cancel_button.hide()
        self.cancel_button.setEnabled(True)
        self.local_button.setEnabled(True)
        self._on_selection(self.model_list.currentItem())

    def _on_cancelled(self) -> None:
        self._download_ended()
        repo_id = self.download.repo_id if self.download else ""
        self.progress_label.setText(f"Cancelled. {format_bytes(partial_bytes(repo_id))} kept: the download resumes "
                                    "where it stopped, now or after a restart.")

    def _on_failed(self, message: str) -> None:
        self._download_ended()
        self.progress.hide()
        self._show_error(message)

    def _on_finished(self, folder: Path) -> None:
        self._download_ended()
        rec = self.recommendation(self.download.repo_id) if self.download else None
        self.engine_update = {"model": str(folder), "kv_cache_dtype": self.kv_cache_dtype}
        if isinstance(rec, CpuRecommendation):
            self.engine_update.update(rec.engine_update(downloaded_max_len(folder)))
        elif rec is not None:
            self.engine_update.update(max_model_len=rec.recommended_context(self.kv_cache_dtype),
                                      gpu_memory_utilization=rec.model.gpu_memory_utilization)
        self.accept()

    # ---- closing -------------------------------------------------------------------------------------

    def done(self, result: int) -> None:
        """Closing mid-download cancels it (the bytes stay for next time) and waits for the thread."""
        if self.downloading and self.download is not None:
            self.download.cancel()
            self._worker.wait(10)  # type: ignore[union-attr]
        super().done(result)


# ---- the model list: built and greyed out here, so the dialog class keeps to its choices and the download


def _fill(dialog: WelcomeDialog) -> list[Any]:
    """The catalog planned for this machine's GPU, or for its CPU and RAM; returns the planned models."""
    gpu = dialog.probe.gpus[0] if dialog.probe.gpus else None
    embedded = QListWidgetItem("Embedded SmolLM2-135M · already on this machine · works offline and on the CPU")
    embedded.setData(ROLE, EMBEDDED)
    if gpu is None:
        return _fill_cpu(dialog, embedded)
    dialog.hardware_label.setText(f"Detected: {gpu.name}, {gpu.vram_total_bytes / GIB:.1f} GiB of VRAM"
                                  f"{held_by_others(gpu)}. "
                                  f"KV cache: {'FP8' if is_fp8(dialog.kv_cache_dtype) else 'bf16'}.")
    gpu_recs = recommendations(gpu.vram_total_bytes, gpu.vram_free_bytes)
    pick = best(gpu_recs)
    _add_catalog_items(dialog, gpu_recs, pick, embedded)
    if pick is None:
        dialog.reason_label.setText(f"None of the recommended models fits in {gpu.vram_total_bytes / GIB:.1f} GiB "
                                    "with room to think, so the embedded model is the choice.")
    else:
        dialog.reason_label.setText("Figures are the planner's, before download: vLLM measures the real ones "
                                    "at start. Models come from the Hugging Face hub.")
    return gpu_recs


def _fill_cpu(dialog: WelcomeDialog, embedded: QListWidgetItem) -> list[Any]:
    """No NVIDIA GPU: small reasoning models sized by RAM, with speed from the measured memory bandwidth."""
    bandwidth = host_bandwidth()
    ram = ram_total_bytes()
    dialog.hardware_label.setText(
        f"No NVIDIA GPU found: Nalar runs on the CPU engine. {ram / GIB:.1f} GiB of RAM, memory bandwidth "
        f"{bandwidth.describe()}. KV cache: {'FP8' if is_fp8(dialog.kv_cache_dtype) else 'bf16'}.")
    cpu_recs = cpu_recommendations(ram, dialog.kv_cache_dtype, bandwidth)
    pick = best_cpu(cpu_recs)
    _add_catalog_items(dialog, cpu_recs, pick, embedded)
    if pick is None:
        dialog.reason_label.setText(f"None of the small reasoning models fits in {ram / GIB:.1f} GiB of RAM "
                                    "beside the runtime, so the embedded model is the choice.")
    else:
        dialog.reason_label.setText(
            "On the CPU a reasoning model is slow: it thinks for hundreds of tokens before it answers. These "
            "are small enough to be usable. Speeds are upper bounds (memory bandwidth ÷ bytes read per "
            "token); expect less. Models come from the Hugging Face hub.")
    return cpu_recs


def _add_catalog_items(dialog: WelcomeDialog, recs: list[Any], pick: Any, embedded: QListWidgetItem) -> None:
    """One row per planned model (too big: shown, greyed out), the embedded model last; selects the pick."""
    current = embedded
    for rec in recs:
        star = "★ Recommended · " if rec is pick else ""
        kept = partial_bytes(rec.model.repo_id)
        resume = f" · {format_bytes(kept)} already downloaded: resumes" if kept else ""
        note = f"\n{rec.model.note}" if rec.model.note else ""
        item = QListWidgetItem(f"{star}{rec.model.label}{resume}\n{rec.summary()}{note}")
        item.setData(ROLE, rec.model.repo_id)
        if not rec.fits:
            item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled)
        dialog.model_list.addItem(item)
        if rec is pick:
            current = item
    dialog.model_list.addItem(embedded)
    dialog.model_list.setCurrentItem(current)


def _more_button(dialog: WelcomeDialog, buttons: QHBoxLayout) -> QPushButton:
    """*More models…*: the dialog hands over to the model browser, which the window opens."""
    button = QPushButton("More models…")
    button.setToolTip("Search the Hugging Face hub, with this machine's verdict for each model")
    button.clicked.connect(dialog.more_models.emit)
    buttons.addWidget(button)
    return button


def _show_offline(dialog: WelcomeDialog, reason: str | None) -> None:
    """The hub can't be reached: grey out the catalog and select the embedded model."""
    if reason is None:
        return
    log.info("hub unreachable: %s", reason)
    for rec in dialog._recommendations:
        item = dialog.item_for(rec.model.repo_id)
        item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEnabled)
    dialog.model_list.setCurrentItem(dialog.item_for(EMBEDDED))
    dialog.reason_label.setText(f"Offline: {reason} The embedded model works without a network; a model "
                                "folder you already have works too (Local folder…).")


def _emit(signal: Any, *args: object) -> None:
    """Progress, from the download's thread: the dialog may have been closed and deleted meanwhile."""
    try:
        signal.emit(*args)
    except RuntimeError:
        log.debug("welcome dialog gone; dropped a worker result")
