"""Images as Nalar reads them (app.core.chat.images): Pillow's verdict on the bytes, data: URLs only, and the
refusal that names the model."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from app.core.chat.images import (
    ImagePart,
    ImageRefused,
    image_from_url,
    image_part,
    split_content,
    text_only_reason,
    with_images,
)


def encoded(fmt: str, size: tuple[int, int] = (5, 3), **options: object) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (10, 200, 10)).save(out, fmt, **options)
    return out.getvalue()


@pytest.mark.parametrize("fmt,mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")])
def test_each_read_format_keeps_its_bytes_type_and_size(fmt: str, mime: str) -> None:
    """Bug caught: an image re-encoded (quality lost) or sent under the wrong MIME type, or its size misread."""
    data = encoded(fmt)
    assert image_part(data, "x") == ImagePart(data, mime, "x", 5, 3)


def test_a_gif_sends_its_first_frame_as_png() -> None:
    """Bug caught: an animated GIF sent as is (vLLM's processors read one frame, or none) or refused."""
    frames = [Image.new("RGB", (4, 4), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:])
    image = image_part(out.getvalue(), "anim.gif")
    assert (image.mime, image.width, image.height) == ("image/png", 4, 4)
    with Image.open(io.BytesIO(image.data)) as first:
        assert first.convert("RGB").getpixel((0, 0)) == (255, 0, 0)


def test_what_is_not_an_image_url_nalar_reads_is_refused_with_the_reason() -> None:
    """Bugs caught: Nalar fetching an http URL (it fetches nothing); text bytes or a BMP passed as an image."""
    with pytest.raises(ImageRefused, match="only data: URLs"):
        image_from_url("http://example.com/x.png")
    with pytest.raises(ImageRefused, match="not an image"):
        image_part(b"hello, world")
    with pytest.raises(ImageRefused, match="BMP images are not read"):
        image_part(encoded("BMP"))


def test_content_parts_round_trip_through_openai_shape() -> None:
    """Bug caught: the image and the text of one message split apart or reordered on the way to the engine."""
    image = image_part(encoded("PNG"), "")
    content = with_images("What is it?", [image])
    assert content == [{"type": "image_url", "image_url": {"url": image.data_url}},
                       {"type": "text", "text": "What is it?"}]
    assert image_from_url(image.data_url) == image
    assert split_content(content) == ("What is it?", (image,))
    assert with_images("plain", []) == "plain"


def test_the_refusal_names_the_model_and_a_vision_model() -> None:
    """Bug caught: a refusal that says "unsupported" without naming the model or what to load instead."""
    reason = text_only_reason("/home/me/models/SmolLM2-135M-Instruct")
    assert reason.startswith("SmolLM2-135M-Instruct reads text only") and "LLaVA" in reason


def test_a_turns_images_survive_the_history_a_fork_and_an_export(tmp_path) -> None:
    """Bugs caught: images kept only in memory (a reload asks without them); a fork or an import storing the
    turns but not their images; an export that drops them, or writes them into the question's text."""
    from app.core.chat.conversation import Conversation, Turn
    from app.core.chat.history import HistoryStore
    from app.core.chat.history_import import export_json, export_markdown, read_import

    image = image_part(encoded("PNG", (7, 2)), "chart.png")
    conversation = Conversation()
    conversation.add_turn(Turn(user="What does it show?", images=(image,)))
    store = HistoryStore()
    store.start_turn(conversation, conversation.turns[-1])
    store.add_conversations([conversation.fork(0)])
    loaded = store.conversations()
    store.close()
    assert [c.turns[0].images for c in loaded] == [(image,), (image,)]
    assert loaded[0].messages()[0]["content"] == with_images("What does it show?", [image])
    exported = tmp_path / "chat.json"
    exported.write_text(export_json(loaded[0]))
    back = read_import(exported).conversations[0].turns[0]
    assert back.images == (image,) and back.user == "What does it show?"
    assert "[image: chart.png, 7×2, image/png]" in export_markdown(loaded[0])


def test_the_list_reads_no_image_and_a_chat_reads_only_its_own() -> None:
    """Bug caught (at the merge of images with lazy loading): every turn load read the whole image table, every
    picture's bytes in the file, to keep those of the turns read; at start-up, with no turn read, all the same."""
    from app.core.chat.conversation import Conversation, Turn
    from app.core.chat.history import HistoryStore

    store = HistoryStore()
    chats = []
    for name in ("one.png", "two.png"):
        conversation = Conversation()
        conversation.add_turn(Turn(user=f"About {name}?", images=(image_part(encoded("PNG"), name),)))
        store.start_turn(conversation, conversation.turns[-1])
        chats.append(conversation)
    queries: list[str] = []
    store._db.set_trace_callback(queries.append)
    listed = store.conversations(turns=False)
    assert [c.turns for c in listed] == [[], []] and not any("message_images" in q for q in queries)
    (second,) = store.conversations([chats[1].id])
    assert [i.name for i in second.turns[0].images] == ["two.png"]
    image_queries = [q for q in queries if "message_images" in q]
    assert len(image_queries) == 1 and f"IN ({second.turns[0].message_id})" in image_queries[0]
    store.close()
