"""Settings → Tools: add or remove MCP servers, see each one's tools with an on/off switch and "always allow".

Edits a copy; ``value()`` is the validated ``ToolsConfig`` the dialog applies. "Connect" lists the
tools of the servers as edited; a server is offered to chats only once the settings are applied.
"""

from __future__ import annotations

import shlex

from pydantic import ValidationError
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.settings.settings import ToolsConfig, ToolServer, tool_key
from app.ui.chat.plain_text import plain_tooltip
from app.ui.controllers.tools_controller import ToolsController

KEY_ROLE = Qt.ItemDataRole.UserRole


def server_from_line(name: str, line: str) -> ToolServer:
    """A URL (http/https) or a command line, split as a shell would but never run by one."""
    line = line.strip()
    if line.startswith(("http://", "https://")):
        return ToolServer(name=name.strip(), url=line)
    try:
        parts = shlex.split(line)
    except ValueError as exc:
        raise ValueError(f"the command line can't be split: {exc}") from exc
    if not parts:
        raise ValueError("give a command (stdio) or a URL")
    return ToolServer(name=name.strip(), command=parts[0], args=tuple(parts[1:]))


def describe(server: ToolServer) -> str:
    return server.url or shlex.join([server.command, *server.args])


class ToolsTab(QWidget):
    changed = Signal()

    def __init__(self, config: ToolsConfig, tools: ToolsController | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.original = config
        self.tools = tools
        self.servers: list[ToolServer] = list(config.servers)
        self.disabled, self.always = set(config.disabled), set(config.always_allow)
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("name, e.g. files")
        self.line_edit = QLineEdit()
        self.line_edit.setPlaceholderText("command (stdio), e.g. uvx mcp-server-time — or http://127.0.0.1:8000/mcp")
        self.add_button = QPushButton("Add server")
        self.add_button.clicked.connect(self.add_from_fields)
        self.remove_button = QPushButton("Remove server")
        self.remove_button.clicked.connect(self.remove_selected)
        self.connect_button = QPushButton("Connect and list tools")
        self.connect_button.clicked.connect(self.connect_servers)
        self.problem = QLabel(wordWrap=True)
        self.problem.setTextFormat(Qt.TextFormat.PlainText)
        self.problem.setStyleSheet("color: #b00020;")
        self.tree = QTreeWidget()
        self.tree.setObjectName("ToolsTree")
        self.tree.setHeaderLabels(["Server / tool", "On", "Always allow"])
        self.tree.setColumnWidth(0, 380)
        self.tree.itemChanged.connect(self._on_item_changed)
        self.timeout = QDoubleSpinBox()
        self.timeout.setRange(1, 3600)
        self.timeout.setValue(config.call_timeout_s)
        self.timeout.setSuffix(" s")
        self.timeout.valueChanged.connect(self.changed)
        self.new_chats = QCheckBox("Tools on in new chats")
        self.new_chats.setChecked(config.enabled)
        self.new_chats.toggled.connect(self.changed)
        add_row = QHBoxLayout()
        add_row.addWidget(self.name_edit, 1)
        add_row.addWidget(self.line_edit, 3)
        add_row.addWidget(self.add_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.remove_button)
        buttons.addWidget(self.connect_button)
        buttons.addStretch(1)
        form = QFormLayout()
        form.addRow("Call timeout", self.timeout)
        form.addRow("", self.new_chats)
        safety = QLabel("Server commands run only from here, as you. Each call asks before it runs unless you chose "
                        "“Always allow” for that tool; results are shown as text, never run. HTTP servers must be "
                        "on this machine (loopback).", wordWrap=True)
        layout = QVBoxLayout(self)
        layout.addWidget(safety)
        layout.addLayout(add_row)
        layout.addWidget(self.problem)
        layout.addWidget(self.tree, 1)
        layout.addLayout(buttons)
        layout.addLayout(form)
        if tools is not None:
            tools.servers_changed.connect(self.refresh)
        self.refresh()

    # ---- servers -------------------------------------------------------------------------------

    def add_from_fields(self) -> bool:
        try:
            server = server_from_line(self.name_edit.text(), self.line_edit.text())
            if any(s.name == server.name for s in self.servers):
                raise ValueError(f"a server named {server.name!r} exists already")
        except ValidationError as exc:
            self.problem.setText("; ".join(error["msg"].removeprefix("Value error, ") for error in exc.errors()))
            return False
        except ValueError as exc:
            self.problem.setText(str(exc))
            return False
        self.problem.clear()
        self.servers.append(server)
        self.name_edit.clear()
        self.line_edit.clear()
        self.refresh()
        self.changed.emit()
        return True

    def remove_selected(self) -> None:
        item = self.tree.currentItem()
        while item is not None and item.parent() is not None:
            item = item.parent()
        if item is not None:
            name = item.data(0, KEY_ROLE)
            self.servers = [s for s in self.servers if s.name != name]
            self.always = {key for key in self.always if key.split("/", 1)[0] != name}  # its grants go with it
            self.refresh()
            self.changed.emit()

    def connect_servers(self) -> None:
        if self.tools is not None:
            self.connect_button.setEnabled(False)
            self.tools.configure(tuple(self.servers))

    # ---- the tree ------------------------------------------------------------------------------

    def refresh(self) -> None:
        """One row per server (its command or URL, and how it answered), its tools below with their switches."""
        states = self.tools.states if self.tools is not None else {}
        self.connect_button.setEnabled(self.tools is not None)
        self.tree.blockSignals(True)
        self.tree.clear()
        for server in self.servers:
            state = states.get(server.name)
            if state is None or state.config != server:
                status = "not connected yet: Connect to list its tools"
            elif state.problem:
                status = f"unavailable: {state.problem}"
            else:
                status = f"{len(state.tools)} tool(s)"
            top = QTreeWidgetItem([f"{server.name} — {describe(server)} ({status})"])
            top.setData(0, KEY_ROLE, server.name)
            top.setToolTip(0, status)
            self.tree.addTopLevelItem(top)
            for tool in state.tools if state is not None and state.config == server else ():
                item = QTreeWidgetItem([f"{tool.name}: {tool.description.splitlines()[0] if tool.description else ''}"])
                item.setData(0, KEY_ROLE, tool.key)
                item.setToolTip(0, plain_tooltip(tool.description))  # the MCP server wrote it
                item.setCheckState(1, Qt.CheckState.Unchecked if tool.key in self.disabled else Qt.CheckState.Checked)
                item.setCheckState(2, Qt.CheckState.Checked if tool.key in self.always else Qt.CheckState.Unchecked)
                top.addChild(item)
            top.setExpanded(True)
        self.tree.blockSignals(False)

    def _on_item_changed(self, item: QTreeWidgetItem, column: int) -> None:
        key = item.data(0, KEY_ROLE)
        if item.parent() is None or column not in (1, 2):
            return
        checked = item.checkState(column) == Qt.CheckState.Checked
        target = self.disabled if column == 1 else self.always
        if (column == 1) != checked:  # column 1 is "on": unchecked means disabled
            target.add(key)
        else:
            target.discard(key)
        self.changed.emit()

    def tool_item(self, server: str, tool: str) -> QTreeWidgetItem | None:
        """The row of one tool (for tests and keyboard users' scripts)."""
        key = tool_key(server, tool)
        for index in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(index)
            assert top is not None
            for row in range(top.childCount()):
                child = top.child(row)
                if child is not None and child.data(0, KEY_ROLE) == key:
                    return child
        return None

    def value(self) -> ToolsConfig:
        """The edited section, validated (raises ValidationError)."""
        return ToolsConfig(servers=tuple(self.servers), disabled=tuple(sorted(self.disabled)),
                           always_allow=tuple(sorted(self.always)), call_timeout_s=self.timeout.value(),
                           enabled=self.new_chats.isChecked())
