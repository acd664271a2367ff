"""Settings panels for backends (local and remote profiles, fallback, budget) and the local API server.

Profile keys and the server token live in the keyring (KeyStore), never in Settings: the panel
collects typed keys and writes them to the KeyStore when the dialog applies.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.settings.keystore import KeyStore, profile_entry
from app.core.settings.settings import LOCAL_PROFILE, ApiServerConfig, BackendsConfig, EndpointProfile

NO_FALLBACK = ""


class BackendsPanel(QGroupBox):
    """Profiles list with an editor, the active backend, the fallback and the first-token budget."""

    changed = Signal()

    def __init__(self, backends: BackendsConfig, keys: KeyStore, parent: QWidget | None = None) -> None:
        super().__init__("Backends (local engine and remote OpenAI-compatible endpoints)", parent)
        self.setObjectName("BackendsPanel")
        self.keys = keys
        self.profiles: list[dict[str, Any]] = [p.model_dump() for p in backends.profiles]  # EndpointProfile's
        self.new_keys: dict[str, str] = {}  # profile name → key typed in this dialog
        self.renamed: dict[str, str] = {}  # new name → the name its stored key is under
        self.removed: set[str] = set()

        self.list = QListWidget()
        self.list.setMaximumHeight(90)
        self.add_button = QPushButton("Add remote")
        self.remove_button = QPushButton("Remove")
        self.name_edit = QLineEdit()
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("http://gpu-box:8000/v1")
        self.model_edit = QLineEdit()
        self.model_edit.setPlaceholderText("empty: the first model the server lists")
        self.send_budget = QCheckBox("Send the chat's think budget (thinking_token_budget, reasoning_effort)")
        self.send_budget.setToolTip(EndpointProfile.model_fields["send_think_budget"].description or "")
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("stored in the system keyring")
        self.active_combo = QComboBox()
        self.fallback_combo = QComboBox()
        self.fallback_to_local = QCheckBox("When a remote backend fails, answer with the local engine")
        self.fallback_to_local.setChecked(backends.fallback_to_local)
        self.budget = QDoubleSpinBox()
        self.budget.setRange(0.5, 600)
        self.budget.setSuffix(" s")
        self.budget.setValue(backends.first_token_budget_s)
        self.budget.setToolTip(BackendsConfig.model_fields["first_token_budget_s"].description or "")
        self.key_notice = QLabel(wordWrap=True)
        self.key_notice.setObjectName("KeyringNotice")
        self.key_notice.setStyleSheet("color: #8a5300;")
        self.key_notice.hide()

        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        editor = QFormLayout()
        editor.addRow("Name", self.name_edit)
        editor.addRow("Base URL", self.url_edit)
        editor.addRow("Model", self.model_edit)
        editor.addRow("API key", self.key_edit)
        editor.addRow("", self.send_budget)
        choice = QFormLayout()
        choice.addRow("Answer with", self.active_combo)
        choice.addRow("Fallback profile", self.fallback_combo)
        choice.addRow("", self.fallback_to_local)
        choice.addRow("First-token budget", self.budget)
        layout = QVBoxLayout(self)
        layout.addWidget(self.list)
        layout.addLayout(buttons)
        layout.addLayout(editor)
        layout.addLayout(choice)
        layout.addWidget(self.key_notice)

        self._refresh(select=0, active=backends.active, fallback=backends.fallback)
        self.list.currentRowChanged.connect(self._show_profile)
        self.add_button.clicked.connect(self.add_profile)
        self.remove_button.clicked.connect(self.remove_profile)
        for edit in (self.name_edit, self.url_edit, self.model_edit):
            edit.textEdited.connect(self._edit_profile)
        self.send_budget.clicked.connect(self._edit_profile)
        self.key_edit.textEdited.connect(self._edit_key)
        for combo in (self.active_combo, self.fallback_combo):
            combo.currentIndexChanged.connect(self.changed)
        self.fallback_to_local.toggled.connect(self.changed)
        self.budget.valueChanged.connect(self.changed)

    # ---- profiles ------------------------------------------------------------------------------

    def _refresh(self, select: int, active: str, fallback: str) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for profile in self.profiles:
            self.list.addItem(f"{profile['name']} — {profile['base_url']}")
        self.list.blockSignals(False)
        for combo, first, current in ((self.active_combo, (LOCAL_PROFILE, "local engine"), active),
                                      (self.fallback_combo, (NO_FALLBACK, "none"), fallback)):
            combo.blockSignals(True)
            combo.clear()
            combo.addItem(first[1], first[0])
            for profile in self.profiles:
                combo.addItem(profile["name"], profile["name"])
            combo.setCurrentIndex(max(0, combo.findData(current)))
            combo.blockSignals(False)
        has = bool(self.profiles)
        for widget in (self.name_edit, self.url_edit, self.model_edit, self.key_edit, self.remove_button,
                       self.send_budget):
            widget.setEnabled(has)
        if has:
            self.list.setCurrentRow(min(select, len(self.profiles) - 1))
            self._show_profile(self.list.currentRow())
        self.changed.emit()

    def _show_profile(self, row: int) -> None:
        if not 0 <= row < len(self.profiles):
            return
        profile = self.profiles[row]
        name = str(profile["name"])
        self.name_edit.setText(name)
        self.url_edit.setText(str(profile["base_url"]))
        self.model_edit.setText(str(profile["model"]))
        self.send_budget.setChecked(bool(profile.get("send_think_budget", False)))
        self.key_edit.clear()
        stored = name in self.new_keys or self.keys.get(profile_entry(name))
        self.key_edit.setPlaceholderText("a key is stored" if stored else "stored in the system keyring")
        self._show_key_notice()

    def add_profile(self) -> None:
        taken = {p["name"] for p in self.profiles}
        name = next(f"remote-{n}" for n in range(1, 1000) if f"remote-{n}" not in taken)
        self.profiles.append({"name": name, "base_url": "http://127.0.0.1:8000/v1", "model": ""})
        self._refresh(len(self.profiles) - 1, self.active_combo.currentData(), self.fallback_combo.currentData())

    def remove_profile(self) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self.profiles):
            removed = self.profiles.pop(row)
            self.new_keys.pop(removed["name"], None)
            self.removed.add(self.renamed.pop(removed["name"], removed["name"]))
            self._refresh(max(0, row - 1), self.active_combo.currentData(), self.fallback_combo.currentData())

    def _edit_profile(self) -> None:
        row = self.list.currentRow()
        if not 0 <= row < len(self.profiles):
            return
        old_name = str(self.profiles[row]["name"])
        new_name = self.name_edit.text().strip()
        self.profiles[row] = {"name": new_name, "base_url": self.url_edit.text().strip(),
                              "model": self.model_edit.text().strip(),
                              "send_think_budget": self.send_budget.isChecked()}
        if old_name != new_name:
            if old_name in self.new_keys:
                self.new_keys[new_name] = self.new_keys.pop(old_name)
            self.renamed[new_name] = self.renamed.pop(old_name, old_name)
        self.list.item(row).setText(f"{new_name} — {self.profiles[row]['base_url']}")
        for combo in (self.active_combo, self.fallback_combo):
            combo.setItemText(row + 1, new_name)
            combo.setItemData(row + 1, new_name)
        self.changed.emit()

    def _edit_key(self, text: str) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self.profiles):
            self.new_keys[str(self.profiles[row]["name"])] = text
            self._show_key_notice()

    def _show_key_notice(self) -> None:
        self.key_notice.setVisible(not self.keys.persistent)
        if not self.keys.persistent:
            self.key_notice.setText(self.keys.notice or
                                    "No system keyring: keys are kept in memory for this session only.")

    # ---- values --------------------------------------------------------------------------------

    def value(self) -> BackendsConfig:
        """Raises pydantic's ValidationError for a bad profile (the dialog shows it)."""
        names = [p["name"] for p in self.profiles]
        if len(set(names)) != len(names):
            raise ValueError("two profiles have the same name")
        return BackendsConfig(profiles=tuple(EndpointProfile.model_validate(p) for p in self.profiles),
                              active=self.active_combo.currentData() or LOCAL_PROFILE,
                              fallback=self.fallback_combo.currentData() or NO_FALLBACK,
                              fallback_to_local=self.fallback_to_local.isChecked(),
                              first_token_budget_s=self.budget.value())

    def store_keys(self) -> None:
        """Write typed keys; a renamed profile takes its stored key along; a removed one's is deleted."""
        names = {p["name"] for p in self.profiles}
        for new_name, old_name in self.renamed.items():
            stored = self.keys.get(profile_entry(old_name))
            if new_name in names and stored and not self.new_keys.get(new_name):
                self.keys.set(profile_entry(new_name), stored)
            if old_name not in names:
                self.removed.add(old_name)
        for name, key in self.new_keys.items():
            if key:
                self.keys.set(profile_entry(name), key)
        for name in self.removed - names:
            self.keys.delete(profile_entry(name))
        self.new_keys.clear()
        self.renamed.clear()
        self.removed.clear()


class ApiServerPanel(QGroupBox):
    """Opt-in local API server: on/off, port, and the URL and token to give other apps."""

    changed = Signal()

    def __init__(self, config: ApiServerConfig, keys: KeyStore, parent: QWidget | None = None) -> None:
        super().__init__("Local API server (OpenAI-compatible, 127.0.0.1 only)", parent)
        self.setObjectName("ApiServerPanel")
        self.keys = keys
        self.enabled = QCheckBox("Serve the loaded model to other apps on this machine")
        self.enabled.setChecked(config.enabled)
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setValue(config.port)
        self.url_label = QLabel()
        self.url_label.setObjectName("ApiServerUrl")
        self.token_edit = QLineEdit()
        self.token_edit.setObjectName("ApiServerToken")
        self.token_edit.setReadOnly(True)
        self.token_edit.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.copy_button = QPushButton("Copy token")
        self.copy_button.clicked.connect(self.copy_token)
        token_row = QHBoxLayout()
        token_row.addWidget(self.token_edit, 1)
        token_row.addWidget(self.copy_button)
        form = QFormLayout(self)
        form.addRow("", self.enabled)
        form.addRow("Port", self.port)
        form.addRow("URL", self.url_label)
        form.addRow("Bearer token", token_row)
        self.enabled.toggled.connect(self._update)
        self.port.valueChanged.connect(self._update)
        self._update()

    def _update(self) -> None:
        on = self.enabled.isChecked()
        self.url_label.setText(f"http://127.0.0.1:{self.port.value()}/v1" if on else "off")
        if on and not self.token_edit.text():
            self.token_edit.setText(self.keys.api_server_token())  # made once, kept in the keyring
        for widget in (self.port, self.token_edit, self.copy_button):
            widget.setEnabled(on)
        self.changed.emit()

    def copy_token(self) -> None:
        QGuiApplication.clipboard().setText(self.token_edit.text())

    def value(self) -> ApiServerConfig:
        return ApiServerConfig(enabled=self.enabled.isChecked(), port=self.port.value())
