"""The files attached to the next question: a chip each (name, size, tokens), Attach…, and the check that
they fit the context before anything is sent. PDFs are read one at a time off the GUI thread, behind a Cancel."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from app.core.chat.attachments import (
    Attachment,
    AttachmentError,
    PdfFile,
    question_with_files,
    read_file,
    read_pdf,
)
from app.core.chat.conversation import Conversation
from app.core.chat.images import ImagePart, ImageRefused, is_image_path, read_image, text_only_reason
from app.core.chat.pdf_text import Cancellation
from app.core.models.embedded_model import embedded_model_dir
from app.core.models.token_count import ContextFit, TokenCounter, counter_for
from app.core.settings.settings import LOCAL_PROFILE, Settings
from app.core.steering.kept_thinking import counted_texts, think_block
from app.engine.events import EngineReady
from app.ui.controllers.operations import COUNTING, Operation, TokenCounts, run_blocking

FILES_TIP = "Attach text, code, Markdown, CSV or PDF files (or drop or paste them on the prompt)."
FILE_FILTER = "Text, code, Markdown, CSV, PDF or images (*.png *.jpg *.jpeg *.webp *.gif *.txt *.md *.py *.js *.ts " \
              "*.c *.cpp *.h *.rs *.go *.java *.json *.yaml *.yml *.toml *.csv *.tsv *.log *.tex *.html *.xml *.sh " \
              "*.pdf);;Any file (*)"


def model_counter(settings: Settings) -> TokenCounter:
    """The local model's own tokenizer; an estimate for a remote backend or a model not on disk."""
    if settings.backends.active != LOCAL_PROFILE:
        return counter_for(None)
    model = settings.engine.model
    folder = Path(model).expanduser() if model else embedded_model_dir()
    return counter_for(folder if folder.is_dir() else None)


def context_fit(settings: Settings, conversation: Conversation, question: str, counter: TokenCounter) -> ContextFit:
    """What the next request would hold: the conversation so far, the question with its files, and room
    for the reply (answer tokens, and the think budget)."""
    history = branch_tokens(conversation, counter)
    room = settings.sampling.max_tokens + settings.sampling.think_budget
    return ContextFit(settings.engine.max_model_len, history + counter.count(question), room)


def branch_tokens(conversation: Conversation, counter: TokenCounter) -> int:
    """The questions and answers of the branch shown, and the thinking kept with them: what the model reads again
    on the next send."""
    kept = sum(counter.count(think_block(turn.thinking)) for turn in conversation.turns[:-1]
               if turn.keep_thinking and turn.thinking.strip())
    return kept + sum(counter.count(turn.user) + counter.count(turn.answer) for turn in conversation.turns)


class PdfReadings(QObject):
    """PDFs waiting for their text, read one at a time by the runner (pypdf in a child process, app/core/chat/
    pdf_text.py): a PDF of 2,000 pages sharing one stream held the GUI thread for over a minute. ``cancel`` ends the
    reading at once and drops the PDFs still waiting."""

    read = Signal(object)  # Attachment
    refused = Signal(str, str)  # the problem, naming the file; the fix
    changed = Signal()  # one started or ended

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.waiting: list[PdfFile] = []
        self.reading: PdfFile | None = None
        self._operation: Operation[Attachment] | None = None
        self._cancellation = Cancellation()

    def add(self, pdf: PdfFile) -> None:
        self.waiting.append(pdf)
        self._next()

    def cancel(self) -> None:
        self._cancellation.cancel()
        if self._operation is not None:
            self._operation.cancel()
        self.waiting.clear()
        self.reading = self._operation = None
        self.changed.emit()

    @property
    def pid(self) -> int | None:
        """The reading child's (for a test to watch it end)."""
        return self._cancellation.pid if self.reading is not None else None

    def _next(self) -> None:
        if self.reading is None and self.waiting:
            pdf = self.reading = self.waiting.pop(0)
            cancellation = self._cancellation = Cancellation()
            self._operation = run_blocking(f"Reading {pdf.name}", lambda: read_pdf(pdf, cancellation), self)
            self._operation.success(self._done).failure(lambda exc: self._failed(pdf, exc))
        self.changed.emit()

    def _done(self, attachment: Attachment) -> None:
        self.reading = self._operation = None
        self.read.emit(attachment)
        self._next()

    def _failed(self, pdf: PdfFile, exc: Exception) -> None:
        self.reading = self._operation = None
        if isinstance(exc, AttachmentError):
            self.refused.emit(f"{exc.name} was not attached: {exc.problem}", exc.fix)
        else:  # logged by the runner with its traceback
            self.refused.emit(f"{pdf.name} was not attached: it can't be read ({type(exc).__name__}: {exc})",
                              "Attach its text instead.")
        self._next()


class AttachmentsBar(QWidget):
    """Holds the attachments until a send takes them; refuses a file it can't read, saying why."""

    changed = Signal()
    refused = Signal(str, str)  # the problem, the fix

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("AttachmentsBar")
        self.attachments: list[Attachment] = []
        self.images: list[ImagePart] = []
        self.image_refusal: str | None = "Images need a vision model, and none is loaded."  # None: images go in
        self.counter = counter_for(None)
        self.checking = False  # a send's files being counted
        self.counts = TokenCounts(self)  # a long file's tokens, counted off the GUI thread
        self.pdfs = PdfReadings(self)
        self.pdfs.read.connect(self._pdf_read)
        self.pdfs.refused.connect(self.refused)
        self.pdfs.changed.connect(self._show)
        self.attach_button = QPushButton("Attach…")
        self.attach_button.setObjectName("AttachButton")
        self.attach_button.setToolTip(f"{FILES_TIP} {self.image_refusal}")
        self.attach_button.clicked.connect(self.choose_files)
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.addWidget(self.attach_button)
        self._row.addStretch(1)

    choose = Signal(list)  # list[Path] the user picked: the window counts them with the model's tokenizer

    def choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach files", "", FILE_FILTER)
        if paths:
            self.choose.emit([Path(p) for p in paths])

    def set_model(self, ready: EngineReady) -> None:
        """The loaded model decides whether images go in (vLLM's verdict, EngineReady.reads_images)."""
        self.image_refusal = None if ready.reads_images else text_only_reason(ready.model)
        self.attach_button.setToolTip(f"{FILES_TIP} " + (self.image_refusal or "Images (PNG, JPEG, WebP, a GIF's "
                                                          "first frame) go to the loaded vision model."))

    def add_paths(self, paths: list[Path], counter: TokenCounter | None = None) -> None:
        """Attaches each file, or says why not; a PDF's text follows, read off the GUI thread."""
        self.counter = counter or self.counter
        for path in paths:
            try:
                if not is_image_path(path):
                    read = read_file(path)
                    if isinstance(read, PdfFile):
                        self.pdfs.add(read)
                    else:
                        self.attachments.append(read)
                elif self.image_refusal is not None:
                    self.refused.emit(f"{path.name} was not attached: {self.image_refusal}",
                                      "Load a vision model in Settings, or describe the image in words.")
                else:
                    self.images.append(read_image(path))
            except AttachmentError as exc:
                self.refused.emit(f"{exc.name} was not attached: {exc.problem}", exc.fix)
            except ImageRefused as exc:
                self.refused.emit(f"{path.name} was not attached: {exc.problem}", exc.fix)
            except OSError as exc:
                self.refused.emit(f"{path.name} was not attached: it can't be read ({exc.strerror or exc})",
                                  "Check that it exists and that you may read it.")
        self._show()

    def still_reading(self) -> bool:
        """Whether a PDF is still being read (if so, says so: a question sent now would go without it), or a send's
        files are being counted (that send goes on once they are)."""
        if self.checking:
            return True
        if self.pdfs.reading is not None:
            self.refused.emit(f"{self.pdfs.reading.name} is still being read: the question waits for it",
                              "Send again once its chip shows, or Cancel its reading to send without it.")
        return self.pdfs.reading is not None

    def _pdf_read(self, attachment: Attachment) -> None:
        self.attachments.append(attachment)
        if attachment.note:
            self.refused.emit(f"{attachment.name} was attached in part: {attachment.note}",
                              "Attach the pages that matter as a smaller PDF or as text.")
        self._show()

    def remove(self, index: int) -> None:
        if index < len(self.attachments):
            del self.attachments[index]
        else:
            del self.images[index - len(self.attachments)]
        self._show()

    def clear(self) -> None:
        self.attachments.clear()
        self.images.clear()
        self._show()

    def tokens(self) -> int:
        return sum(self.counter.count(a.text) for a in self.attachments)

    async def refusal(self, settings: Settings, conversation: Conversation, question: str) -> str | None:
        """Why ``question`` (with the files) can't go in the context, or None. Counted on a worker when not cheap
        (a 1 MB file: 0.8 s), so the window is free meanwhile; ``checking`` says so, and a second send waits."""
        counter, texts = self.counter, [*counted_texts(conversation), question, *(a.text for a in self.attachments)]
        if not counter.cheap(texts):
            self.checking = True
            try:
                await run_blocking("Counting the question's tokens", lambda: counter.count_all(texts), parent=self)
            finally:
                self.checking = False
        fit = context_fit(settings, conversation, question, counter)
        return None if fit.fits else fit.refusal(self.tokens())

    def question(self, text: str) -> str:
        return question_with_files(text, self.attachments)

    def _show(self) -> None:
        while self._row.count() > 2:  # the button and the stretch stay
            item = self._row.takeAt(1)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        self.counts.counted(self.counter, "chips", [attached.text for attached in self.attachments], self._show)
        chips: list[Attachment | ImagePart] = [*self.attachments, *self.images]
        for index, attached in enumerate(chips):
            self._row.insertWidget(1 + index, self._chip(index, attached))
        if self.pdfs.reading is not None:
            self._row.insertWidget(1 + len(chips), _reading_chip(self.pdfs.reading.name, len(self.pdfs.waiting),
                                                                 self.pdfs.cancel))
        self.changed.emit()

    def chip_text(self, attached: Attachment | ImagePart) -> str:
        """A file's name, size and tokens; an image's name, size and pixels (its tokens are the model's
        processor's to count, at send)."""
        if isinstance(attached, ImagePart):
            return (f"{attached.name} · {_size(len(attached.data))} · {attached.width}×{attached.height} px · "
                    "tokens counted by the model")
        tokens = self.counter.known(attached.text)
        counted = COUNTING if tokens is None else f"{'' if self.counter.exact else '≈'}{tokens:,} tokens"
        return f"{attached.name} · {_size(attached.size_bytes)} · {counted}"

    def _chip(self, index: int, attached: Attachment | ImagePart) -> QWidget:
        remove = QToolButton()
        remove.setText("✕")
        remove.setToolTip("Remove this file")
        remove.clicked.connect(lambda: self.remove(index))
        return _chip_widget("AttachmentChip", self.chip_text(attached), remove)


def _reading_chip(name: str, waiting: int, cancel: Callable[[], None]) -> QWidget:
    """The PDF being read (and how many wait behind it), with the Cancel that ends its reading."""
    button = QPushButton("Cancel")
    button.setObjectName("CancelReading")
    button.setToolTip("Stop reading this PDF" + (" and those waiting" if waiting else ""))
    button.clicked.connect(cancel)
    return _chip_widget("ReadingChip", f"Reading {name}…" + (f" ({waiting} more waiting)" if waiting else ""),
                        button)


def _chip_widget(object_name: str, text: str, button: QWidget) -> QWidget:
    """A chip of the bar: ``text`` (a file's name is outside text: shown as plain text) and its button."""
    chip = QWidget()
    chip.setObjectName(object_name)
    row = QHBoxLayout(chip)
    row.setContentsMargins(4, 0, 0, 0)
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setText(text)
    row.addWidget(label)
    row.addWidget(button)
    return chip


def _size(size: int) -> str:
    return f"{size:,} B" if size < 1024 else f"{size / 1024:,.1f} KiB" if size < 1 << 20 else f"{size / 2**20:,.1f} MiB"
