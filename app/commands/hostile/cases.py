"""The hostile inputs of the safety rounds, as the user gives them to the window: one line of ``CASES`` each.

An act sets up the window (not timed) and returns the probe: the act itself, and what the window shows once it
has answered, a result or a message. A new input of a kind below is one maker in inputs.py and one line here.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.commands.hostile import inputs
from app.commands.hostile.stage import Act, Answer, Case, Probe, Stage
from app.core.settings.settings import ApiServerConfig, Settings
from app.engine.scripted import Script

QUESTION = "What does each item cost?"


def _rendered(pane: Any) -> int:
    return int(pane.view.document().characterCount())


def answer_streamed(make: Callable[[], str], *, delta_chars: int = 3_000, deltas_per_s: float = 500.0,
                    whole_text: bool = True) -> Act:
    """The scripted engine streams ``make()`` into the answer pane. Answered: the reply finished and its formulas
    drawn or shown as their source for good (and, with ``whole_text``, all of its text in the pane)."""
    def act(stage: Stage) -> Probe:
        text = make()
        deltas = [text[n:n + delta_chars] for n in range(0, len(text), delta_chars)]
        # A price list repeats itself and is no loop; the guard would cut it, and the pane is what is measured.
        settings = Settings(sampling=Settings().sampling.with_loop_guard(enabled=False))
        window = stage.open(scripts=[Script(deltas, tokens_per_second=deltas_per_s, think_start="closed")],
                            settings=settings)
        window.menus.trigger("new_conversation")
        finished: list[object] = []
        window.reply_finished.connect(finished.append)
        pane = window.chat_view.answer_pane

        def send() -> None:
            window.prompt.setPlainText(QUESTION)
            window.menus.trigger("send")

        def answered() -> Answer | None:
            if window.banner.isVisible():
                return "message"
            shown = _rendered(pane) >= 0.99 * len(text) if whole_text else _rendered(pane) > 1
            return "result" if finished and shown and not pane.drawing else None

        return Probe(send, answered, "the reply finished, " + ("all of its text in the answer pane, " if whole_text
                                                               else "") + "its formulas drawn or shown as source",
                     shown=lambda: f"{_rendered(pane):,} of {len(text):,} characters in the pane, finished: "
                                   f"{bool(finished)}, formulas still drawing: {pane.drawing}")
    return act


def answer_reopened(make: Callable[[], str]) -> Act:
    """A stored chat whose answer is ``make()``, opened from the conversation list."""
    def act(stage: Stage) -> Probe:
        text = make()
        window = stage.open(conversations=[inputs.priced_chat(text), inputs.zebra_chat()])
        store, chats = window.session.store, window.conversation_list
        row = next(n for n in range(len(store.model)) if store.model[n].title == "Prices")
        other = next(n for n in range(len(store.model)) if n != row)
        chats.select(other)  # the other chat shown first, whichever the list opened on
        stage.wait(lambda: store.current_row == other, 10, "the other chat shown")
        pane = window.chat_view.answer_pane
        return Probe(lambda: chats.select(row), lambda: "result" if _rendered(pane) >= 0.99 * len(text) else None,
                     "the chat's answer whole in the answer pane",
                     shown=lambda: f"{_rendered(pane):,} of {len(text):,} characters in the pane")
    return act


def search(query: str | Callable[[], str]) -> Act:
    """``query`` pasted into Ctrl+K's search (the dialog searches after its typing pause), over a history that
    holds one chat its first word finds."""
    def act(stage: Stage) -> Probe:
        text = query() if callable(query) else query
        window = stage.open(conversations=[inputs.zebra_chat()])
        dialog = window.dialogs.open_search()

        def answered() -> Answer | None:
            status = dialog.status.text()
            return "message" if status.startswith("The search failed") else "result" if "result(s)" in status \
                else None

        return Probe(lambda: dialog.query.setText(text), answered, "the dialog's count of results, or why the "
                     "search failed", shown=dialog.status.text, cleanup=dialog.reject)
    return act


def import_file(make: Callable[[Path], Path]) -> Act:
    """File → Import of the file ``make`` writes in the case's folder."""
    def act(stage: Stage) -> Probe:
        window = stage.open()
        path, bar, banner = make(stage.folder), window.statusBar(), window.banner

        def answered() -> Answer | None:
            if banner.isVisible() and "Import failed" in banner.text():
                return "message"
            return "result" if bar.currentMessage().startswith("Imported ") else None

        return Probe(lambda: window.dialogs.import_conversations(str(path)), answered, "the status bar's "
                     "“Imported …” or the banner's “Import failed: …”",
                     shown=lambda: (banner.text() if banner.isVisible() else bar.currentMessage()).replace(
                         str(path), path.name))  # the bench's temporary folder says nothing
    return act


def attach(make: Callable[[Path], Path]) -> Act:
    """The file ``make`` writes, attached as a drop on the prompt or Attach… does (``MainWindow.attach``, which
    hands it to ``AttachmentsBar.add_paths``)."""
    def act(stage: Stage) -> Probe:
        window = stage.open()
        path = make(stage.folder)
        banner, bar = window.banner, window.attachments

        def answered() -> Answer | None:
            if any(attached.name == path.name for attached in bar.attachments):
                return "result"
            return "message" if banner.isVisible() and f"{path.name} was not attached" in banner.text() else None

        def cleanup() -> None:
            if path.is_fifo():
                inputs.release_fifo(path)

        return Probe(lambda: window.attach([path]), answered, f"a chip for {path.name}, or the banner naming it",
                     shown=lambda: banner.text() if banner.isVisible() else "", cleanup=cleanup)
    return act


class TokenlessCrowd:
    """``count`` connections without the token (half of them sending headers that never end), then one request
    with it, on a thread of its own: another process on this machine, to the window."""

    def __init__(self, port: int, token: str, count: int) -> None:
        self.port, self.token, self.count = port, token, count
        self.held: list[socket.socket] = []
        self.outcome: tuple[int, str] | None = None
        self.failure = ""

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="nalar-bench-api-clients").start()

    def answered(self) -> Answer | None:
        return None if self.outcome is None else "result" if self.outcome[0] == 200 else "message"

    def shown(self) -> str:
        return self.failure or (f"HTTP {self.outcome[0]}: {self.outcome[1]}" if self.outcome else "")

    def close(self) -> None:
        for sock in self.held:
            sock.close()

    def _run(self) -> None:
        try:
            for index in range(self.count):
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
                self.held.append(sock)
                if index >= self.count // 2:
                    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers begun, never ended
            client = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            client.request("GET", "/v1/models", headers={"Authorization": f"Bearer {self.token}"})
            response = client.getresponse()
            self.outcome = (response.status, response.read(300).decode(errors="replace"))
            client.close()
        except OSError as exc:
            self.failure = f"the client with the token failed: {exc}"


def free_port() -> int:
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def api_slots(count: int = 64) -> Act:
    """The local API server (scripted engine, 127.0.0.1): ``count`` connections without the token, then a client
    with it. Answered: that client's 200 (a refusal, a message)."""
    def act(stage: Stage) -> Probe:
        window = stage.open(settings=Settings(api_server=ApiServerConfig(enabled=True, port=free_port())))
        stage.wait(lambda: window.controller.api_server is not None, 30, "the local API server listening")
        crowd = TokenlessCrowd(window.controller.api_server.port, stage.keys.api_server_token(), count)
        return Probe(crowd.start, crowd.answered, f"an answer to the client with the token after {count} connections "
                     "without it", shown=crowd.shown, cleanup=crowd.close)
    return act


CASES: tuple[Case, ...] = (
    Case("answer-price-list-streamed", 60, answer_streamed(inputs.price_list)),
    Case("answer-price-list-reopened", 30, answer_reopened(inputs.price_list)),
    Case("search-nul", 10, search("zebra\x00")),
    Case("search-lone-surrogate", 10, search("zebra\ud800")),
    Case("search-100000-words", 10, search(inputs.huge_query)),
    Case("import-open-brackets", 10, import_file(inputs.open_brackets)),
    Case("import-infinity", 10, import_file(inputs.infinity_count)),
    Case("import-16000-turns", 60, import_file(inputs.linear_chat)),
    Case("attach-fifo", 10, attach(inputs.fifo)),
    Case("attach-dev-zero-link", 10, attach(inputs.dev_zero_link)),
    Case("attach-bom-bad-bytes", 10, attach(inputs.bom_then_bad_bytes)),
    # Safety items 1 (a cap and a deadline per formula) and 3 (PDFs read off the GUI thread, with caps and a deadline).
    Case("attach-pdf-2000-pages", 30, attach(inputs.shared_stream_pdf)),
    Case("answer-formula-20kb", 30, answer_streamed(inputs.long_formula, whole_text=False)),
    Case("api-64-connections-without-token", 30, api_slots(64)),
)
CASE_NAMES = tuple(case.name for case in CASES)
