"""Images in a question, for vision-language models: the bytes and their type, read once and kept with the turn.

OpenAI's shape carries an image as an ``image_url`` part with a ``data:`` URL; Nalar reads only those (it
fetches nothing). Inside the program an image is an ImagePart (bytes + MIME type), so it crosses the engine
pipe as typed data. Pillow reads the pixel size and turns a GIF's first frame into a PNG.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.safe_files import FileTooLarge, NotRegularFile, read_regular

MAX_IMAGE_BYTES = 20 * 1024 * 1024
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")
READ_MIMES = ("image/png", "image/jpeg", "image/webp")  # what reaches the model (a GIF becomes a PNG)
VISION_EXAMPLES = "LLaVA 1.5 (llava-hf/llava-1.5-7b-hf) or Qwen2.5-VL"


@dataclass(frozen=True)
class ImagePart:
    """One image for the model: its bytes as the model's processor reads them, and what the user sees of it."""

    data: bytes
    mime: str  # one of READ_MIMES
    name: str = ""
    width: int = 0
    height: int = 0

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"

    def as_openai(self) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": self.data_url}}


@dataclass(frozen=True)
class TextWithImages:
    """A message's content with images: its text, and its images in the order sent."""

    text: str
    images: tuple[ImagePart, ...]


class ImageRefused(ValueError):
    """An image Nalar won't send: ``problem`` says why, ``fix`` what to do."""

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


def text_only_reason(model: str) -> str:
    """Why an image is refused for ``model``: the window's refusal and the attach button's tooltip."""
    name = model.rstrip("/").rsplit("/", 1)[-1] or "This model"
    return f"{name} reads text only; load a vision model such as {VISION_EXAMPLES} to attach images."


def is_image_path(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def image_part(data: bytes, name: str = "") -> ImagePart:
    """``data`` as an ImagePart, its type and size read by Pillow; a GIF's first frame becomes a PNG."""
    if len(data) > MAX_IMAGE_BYTES:
        raise ImageRefused(f"the image is {len(data) / 2**20:.0f} MiB, over the {MAX_IMAGE_BYTES >> 20} MiB "
                           "Nalar sends", "Send a smaller image.")
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError as exc:  # pragma: no cover - Pillow comes with vLLM
        raise ImageRefused("Pillow is not installed, so images can't be read", "Install Pillow.") from exc
    try:
        with Image.open(io.BytesIO(data)) as image:
            fmt, size = (image.format or "").upper(), image.size
            if fmt == "GIF":
                out = io.BytesIO()
                image.seek(0)
                image.convert("RGB").save(out, "PNG")
                return ImagePart(out.getvalue(), "image/png", name, *size)
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError) as exc:
        raise ImageRefused("this is not an image Pillow can read", "Send a PNG, JPEG, WebP or GIF.") from exc
    mime = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}.get(fmt)
    if mime is None:
        raise ImageRefused(f"{fmt or 'this'} images are not read", "Send a PNG, JPEG, WebP or GIF.")
    return ImagePart(data, mime, name, *size)


def read_image(path: Path) -> ImagePart:
    """The image at ``path`` (ImageRefused names why not; OSError if it can't be read). Only a regular file, and
    at most MAX_IMAGE_BYTES + 1 of it, is read: a ``.png`` linking to /dev/zero must not fill the memory."""
    try:
        return image_part(read_regular(path, MAX_IMAGE_BYTES), path.name)
    except FileTooLarge as exc:
        raise ImageRefused(f"the image is {exc.size / 2**20:.0f} MiB, over the {MAX_IMAGE_BYTES >> 20} MiB "
                           "Nalar sends", "Send a smaller image.") from None
    except NotRegularFile as exc:
        raise ImageRefused(f"this is {exc.kind}, not a regular file, so it is not read",
                           "Attach a saved image file.") from None


def image_from_url(url: str) -> ImagePart:
    """An ``image_url`` part's URL as an ImagePart: ``data:`` URLs only, since Nalar fetches nothing."""
    if not url.startswith("data:"):
        raise ImageRefused("only data: URLs are read (data:image/png;base64,...); Nalar fetches nothing")
    head, _, payload = url.partition(",")
    if not head.endswith(";base64"):
        raise ImageRefused("the data: URL must be base64 (data:image/png;base64,...)")
    try:
        return image_part(base64.b64decode(payload, validate=True))
    except binascii.Error as exc:
        raise ImageRefused("the data: URL's base64 is broken") from exc


def split_content(content: object) -> tuple[str, tuple[ImagePart, ...]]:
    """OpenAI content (text, or a list of text and image_url parts) as its text and its images.

    ImageRefused for a part that is neither, or an image that can't be read."""
    if not isinstance(content, list):
        return ("" if content is None else str(content)), ()
    texts: list[str] = []
    images: list[ImagePart] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("text") or ""))
        elif kind == "image_url":
            url = part.get("image_url")
            images.append(image_from_url(str(url.get("url") if isinstance(url, dict) else url or "")))
        else:
            raise ImageRefused(f"content parts of type {kind!r} are not read")
    return "".join(texts), tuple(images)


def with_images(text: str, images: tuple[ImagePart, ...] | list[ImagePart]) -> str | list[dict[str, Any]]:
    """OpenAI content for ``text`` and ``images``: the plain text when there are none."""
    if not images:
        return text
    return [*(image.as_openai() for image in images), {"type": "text", "text": text}]
