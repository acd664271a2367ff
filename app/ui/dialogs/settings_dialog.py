"""SettingsDialog: a form generated from the settings schema, with a live planner.

No field is listed here by hand: widgets, ranges and tooltips come from the pydantic
models in app.core.settings.settings, so adding a setting there adds it here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from PySide6.QtCore import Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.models.embedded_model import embedded_model_dir
from app.core.models.model_folder import folder_problem, looks_local
from app.core.settings.keystore import KeyStore
from app.core.settings.settings import EngineConfig, LoopGuardConfig, SamplingConfig, Settings
from app.engine.events import SpeculationVerdict
from app.engine.machine import capability, speculation
from app.engine.machine.capability import HardwareProbe
from app.ui.controllers.tools_controller import ToolsController
from app.ui.dialogs.backends_panel import ApiServerPanel, BackendsPanel
from app.ui.dialogs.planner_view import PlannerView
from app.ui.dialogs.presets.presets_tab import PresetsTab
from app.ui.dialogs.schema_form import editor_for, editor_value
from app.ui.dialogs.tools_tab import ToolsTab

SECTIONS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("engine", EngineConfig), ("sampling", SamplingConfig), ("loop_guard", LoopGuardConfig))
TITLES = {"engine": ("Engine (restarts the engine)", "Model && engine"), "sampling": ("Sampling", "Sampling"),
          "loop_guard": ("When a reply loops", "Loop guard")}


def _section_value(settings: Settings, section: str) -> BaseModel:
    """The loop guard travels with each request, inside the sampling settings."""
    return settings.sampling.loop_guard if section == "loop_guard" else getattr(settings, section)
LABELS = {"max_model_len": "Context length (tokens)", "kv_cache_dtype": "KV cache dtype",
          "gpu_memory_utilization": "GPU memory utilization", "cpu_kv_cache_gib": "CPU KV cache (GiB)",
          "enable_prefix_caching": "Prefix caching", "enforce_eager": "Eager mode (no graphs)",
          "trust_remote_code": "Trust remote code", "top_p": "Top-p", "max_tokens": "Max answer tokens",
          "think_budget": "Think budget (tokens)", "reasoning_mode": "Reasoning mode",
          "top_k": "Top-k", "thinking": "Think (new chats)", "reasoning_effort": "Reasoning effort (gpt-oss)",
          "speculative_method": "Speculative decoding",
          "num_speculative_tokens": "Speculative tokens", "prompt_lookup_max": "N-gram lookup max",
          "prompt_lookup_min": "N-gram lookup min"}
SPECULATION_DEFAULT_NOTE = (
    "The first run turns n-gram speculation on for the CPU engine on AVX-512 and leaves it off elsewhere (not "
    "measured there yet). `nalar bench spec` "
    "on a 2-core AMD EPYC (CPU engine, embedded model, greedy) measured n-gram at 1.14× the thinking and 1.58× "
    "the answer tok/s of none (2.5× on a long, repetitive thought). With it on, "
    "greedy text can part from a run without it where two tokens tie in bf16 (docs/BENCHMARKS.md).")


def _label(name: str) -> str:
    return LABELS.get(name, name.replace("_", " ").capitalize())


def model_max_len(model: str) -> int | None:
    folder = Path(model).expanduser() if model else embedded_model_dir()
    try:
        value = json.loads((folder / "config.json").read_text()).get("max_position_embeddings")
        return int(value) if value else None
    except (OSError, ValueError, TypeError):
        return None


def apply_hardware_limits(editors: dict[tuple[str, str], QWidget], probe: HardwareProbe) -> str:
    """Disable the editors of what this machine can't run; the reasons, one a line."""
    combo = editors[("engine", "kv_cache_dtype")]
    assert isinstance(combo, QComboBox)
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    reasons = []
    for row in range(combo.count()):
        dtype = combo.itemData(row)
        reason = capability.kv_dtype_unsupported_reason(dtype, probe)
        item = model.item(row)
        item.setEnabled(reason is None)
        item.setToolTip(reason or "")
        if reason:
            reasons.append(f"{dtype}: {reason}")
    if not model.item(combo.currentIndex()).isEnabled():
        combo.setCurrentIndex(combo.findData("auto"))
    on_gpu = probe.engine_kind == "cuda"
    editors[("engine", "gpu_memory_utilization")].setEnabled(on_gpu)
    editors[("engine", "cpu_kv_cache_gib")].setEnabled(not on_gpu)
    reasons.append("GPU memory utilization applies to the GPU engine only." if not on_gpu
                   else "The CPU KV cache size applies to the CPU engine only.")
    gpus = len(probe.gpus) if on_gpu else 0
    editors[("engine", "tensor_parallel_size")].setEnabled(gpus > 1)
    if gpus <= 1:
        reasons.append(f"Tensor parallel size needs more than one NVIDIA GPU (this machine has {gpus}); "
                       "for more, point a remote profile at a multi-GPU vLLM server.")
    return "\n".join(reasons)


def field_errors(exc: ValidationError) -> list[tuple[str, str, str]]:
    """(section, field, message) for each error of a Settings built from the form."""
    found = []
    for error in exc.errors():
        loc = tuple(str(p) for p in error["loc"])
        field = loc[0] if loc else ""
        if field == "loop_guard" and len(loc) > 1:
            field, section = loc[1], "loop_guard"
        else:
            section = "engine" if field in EngineConfig.model_fields else "sampling"
        found.append((section, field, error["msg"]))
    return found


def backends_problem(exc: ValueError) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"Backends: profile {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return f"Backends: {exc}"


def user_trusts_remote_code(parent: QWidget, model: str) -> bool:
    answer = QMessageBox.warning(
        parent, "Trust remote code?",
        f"This lets {model} run Python code it ships, with your user's rights. Only do this for a "
        "model whose source you trust.", QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
        QMessageBox.StandardButton.No)
    return answer == QMessageBox.StandardButton.Yes


def model_editor(value: str, parent: QWidget) -> tuple[QWidget, QLineEdit]:
    """The model field: its text, Browse… for a folder, and Embedded for the model that ships with Nalar."""
    holder = QWidget()
    row = QHBoxLayout(holder)
    row.setContentsMargins(0, 0, 0, 0)
    edit = QLineEdit(value)
    edit.setPlaceholderText("embedded SmolLM2-135M-Instruct")

    def browse_model() -> None:
        folder = QFileDialog.getExistingDirectory(parent, "Choose a model folder (with config.json)")
        if folder:
            edit.setText(folder)

    browse = QPushButton("Browse…")
    browse.clicked.connect(browse_model)
    embedded = QPushButton("Embedded")
    embedded.setToolTip("Use the small model that ships with Nalar")
    embedded.clicked.connect(lambda: edit.setText(""))
    row.addWidget(edit, 1)
    row.addWidget(browse)
    row.addWidget(embedded)
    return holder, edit


def apply_speculation_limits(editors: dict[tuple[str, str], QWidget], verdicts: tuple[SpeculationVerdict, ...]
                             ) -> str:
    """Grey out the speculative methods vLLM refused at the running engine's start, with vLLM's reason."""
    combo = editors[("engine", "speculative_method")]
    assert isinstance(combo, QComboBox)
    model = combo.model()
    assert isinstance(model, QStandardItemModel)
    lines = [SPECULATION_DEFAULT_NOTE]
    if not verdicts:
        lines.append("Which speculative methods run here is vLLM's decision, read when the local engine starts "
                     "(none has started yet).")
    for row in range(combo.count()):
        verdict = next((v for v in verdicts if v.method == combo.itemData(row)), None)
        item = model.item(row)
        item.setEnabled(verdict is None or verdict.works)
        item.setToolTip(speculation.NEEDS.get(str(combo.itemData(row)), "") if verdict is None or verdict.works
                        else verdict.reason or "")
        if verdict is not None and not verdict.works:
            lines.append(f"Speculative {verdict.method}: vLLM refuses it here: {verdict.reason}")
    if not model.item(combo.currentIndex()).isEnabled():
        combo.setCurrentIndex(combo.findData("off"))
    return "\n".join(lines)


class SettingsDialog(QDialog):
    """Edits a copy of the settings; ``applied`` carries the validated result."""

    applied = Signal(object)  # Settings

    def __init__(self, settings: Settings, probe: HardwareProbe | None = None, parent: QWidget | None = None,
                 keys: KeyStore | None = None, tools: ToolsController | None = None,
                 speculation: tuple[SpeculationVerdict, ...] = ()) -> None:
        super().__init__(parent)
        self.setWindowTitle("Nalar settings")
        self.setObjectName("SettingsDialog")
        self.resize(760, 660)  # tabs keep it on a 768-px laptop screen
        self.probe = probe or capability.probe_hardware()
        self.original = settings
        self.editors: dict[tuple[str, str], QWidget] = {}
        self.errors: dict[tuple[str, str], QLabel] = {}
        self.candidate: Settings | None = settings
        self.reasons = QLabel(wordWrap=True)
        self.reasons.setObjectName("DisabledReasons")
        self.reasons.setStyleSheet("color: #8a5300;")
        self.form_error = QLabel(wordWrap=True)
        self.form_error.setStyleSheet("color: #b00020;")
        self.planner_view = PlannerView()

        layout = QVBoxLayout(self)
        self.tabs = QTabWidget()
        self.tabs.setObjectName("SettingsTabs")
        layout.addWidget(self.tabs)
        pages: dict[str, QVBoxLayout] = {}
        for section, schema in SECTIONS:
            box = QGroupBox(TITLES[section][0])
            form = QFormLayout(box)
            for name, field in schema.model_fields.items():
                if name in ("loop_guard", "request"):
                    continue  # the loop guard has its own tab; request controls are per API request
                editor = self._editor_for(section, name, field, getattr(_section_value(settings, section), name))
                editor.setToolTip(field.description or "")
                error = QLabel()
                error.setStyleSheet("color: #b00020;")
                error.hide()
                cell = QWidget()
                cell_layout = QVBoxLayout(cell)
                cell_layout.setContentsMargins(0, 0, 0, 0)
                cell_layout.addWidget(editor)
                cell_layout.addWidget(error)
                form.addRow(_label(name), cell)
                self.errors[(section, name)] = error
            page = QWidget()
            pages[section] = QVBoxLayout(page)
            pages[section].addWidget(box)
            self.tabs.addTab(page, TITLES[section][1])
        self.keys = keys or KeyStore()
        self.backends_panel = BackendsPanel(settings.backends, self.keys)
        self.api_server_panel = ApiServerPanel(settings.api_server, self.keys)
        self.backends_panel.changed.connect(self.revalidate)
        self.api_server_panel.changed.connect(self.revalidate)
        for panel, title in ((self.backends_panel, "Backends"), (self.api_server_panel, "Local API server")):
            page = QWidget()
            page_layout = QVBoxLayout(page)
            page_layout.addWidget(panel)
            page_layout.addStretch(1)
            self.tabs.addTab(page, title)
        self.tools_tab = ToolsTab(settings.tools, tools)  # app/ui/dialogs/tools_tab.py
        self.tools_tab.changed.connect(self.revalidate)
        self.tabs.addTab(self.tools_tab, "Tools")
        self.presets_tab = PresetsTab(settings.presets)  # app/ui/dialogs/presets
        self.presets_tab.changed.connect(self.revalidate)
        self.tabs.addTab(self.presets_tab, "Presets")
        engine_page = pages["engine"]
        engine_page.addWidget(self.reasons)
        engine_page.addWidget(QLabel("<b>What fits</b> (planner, before anything loads)"))
        engine_page.addWidget(self.planner_view)
        pages["sampling"].addStretch(1)
        pages["loop_guard"].addStretch(1)
        layout.addWidget(self.form_error)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Apply
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self._on_ok)
        self.buttons.rejected.connect(self.reject)
        self.buttons.button(QDialogButtonBox.StandardButton.Apply).clicked.connect(self._on_apply)
        layout.addWidget(self.buttons)
        self.reasons.setText(apply_hardware_limits(self.editors, self.probe) + "\n"
                             + apply_speculation_limits(self.editors, speculation))
        self.revalidate()

    # ---- widgets from the schema ----------------------------------------------------------------

    def _editor_for(self, section: str, name: str, field: Any, value: Any) -> QWidget:
        editor = self._model_editor(value) if name == "model" else editor_for(field, value, self.revalidate)
        editor.setObjectName(f"{section}.{name}")
        self.editors[(section, name)] = editor
        if name == "trust_remote_code":
            assert isinstance(editor, QCheckBox)
            editor.toggled.connect(self._confirm_remote_code)
        return editor

    def _model_editor(self, value: str) -> QWidget:
        holder, self.model_edit = model_editor(value, self)
        self.model_edit.textChanged.connect(self._on_model_changed)
        return holder

    def _on_model_changed(self) -> None:
        # The opt-in belongs to one model: a different model starts untrusted.
        trust = self.editors[("engine", "trust_remote_code")]
        assert isinstance(trust, QCheckBox)
        trust.blockSignals(True)
        trust.setChecked(False)
        trust.blockSignals(False)
        self.revalidate()

    def _confirm_remote_code(self, checked: bool) -> None:
        if checked and not user_trusts_remote_code(self, self.model_edit.text() or "the embedded model"):
            editor = self.editors[("engine", "trust_remote_code")]
            assert isinstance(editor, QCheckBox)
            editor.setChecked(False)

    # ---- validation and the planner -------------------------------------------------------

    def values(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {section: {} for section, _ in SECTIONS}
        for (section, name), editor in self.editors.items():
            out[section][name] = self.model_edit.text().strip() if name == "model" else editor_value(editor)
        return out

    def revalidate(self) -> None:
        for label in self.errors.values():
            label.hide()
        raw = self.values()
        problems: list[str] = []
        try:
            backends = self.backends_panel.value()
        except ValueError as exc:  # a profile's name or URL: shown under the backends panel
            backends = None
            problems.append(backends_problem(exc))
        try:
            presets = self.presets_tab.value()
        except ValueError as exc:  # a name left empty or used twice: shown under the presets
            presets = None
            problems.append(str(exc))
        try:
            candidate = Settings(engine=EngineConfig(**raw["engine"]),
                                 sampling=SamplingConfig(**raw["sampling"], loop_guard=raw["loop_guard"]),
                                 backends=backends or self.original.backends,
                                 api_server=self.api_server_panel.value(), tools=self.tools_tab.value(),
                                 presets=presets or self.original.presets)
        except ValidationError as exc:
            candidate = None
            for section, field, message in field_errors(exc):
                self._field_error(section, field, message)
                problems.append(f"{_label(field)}: {message}")
        model = raw["engine"]["model"]
        problem = folder_problem(Path(model).expanduser()) if looks_local(model) else None
        if problem is not None:
            self._field_error("engine", "model", problem.message)
            problems.append("Model: not a model folder")
            candidate = None
        limit = model_max_len(model)
        if limit and raw["engine"]["max_model_len"] > limit:
            self._field_error("engine", "max_model_len", f"This model supports at most {limit:,} tokens.")
            problems.append("Context length: beyond the model's maximum")
            candidate = None
        if backends is None or presets is None:
            candidate = None
        self.candidate = candidate
        ok = candidate is not None
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(ok)
        self.buttons.button(QDialogButtonBox.StandardButton.Apply).setEnabled(ok)
        backend_problems = [p for p in problems if p.startswith(("Backends: ", "Presets: "))]
        self.form_error.setText("" if ok else "\n".join(backend_problems) or "Fix the fields marked in red to apply.")
        self.planner_view.show_plan(raw["engine"], self.probe)

    def _field_error(self, section: str, name: str, message: str) -> None:
        label = self.errors.get((section, name))
        if label is not None:
            label.setText(message)
            label.show()

    # ---- buttons -------------------------------------------------------------------------------

    def _on_apply(self) -> None:
        if self.candidate is not None:
            self.backends_panel.store_keys()
            self.applied.emit(self.candidate)
            self.original = self.candidate

    def _on_ok(self) -> None:
        if self.candidate is None:
            return
        keys_before = self.keys.profile_changes
        self.backends_panel.store_keys()
        if self.candidate != self.original or self.keys.profile_changes != keys_before:
            self.applied.emit(self.candidate)
        self.accept()

