"""The thinking/answer split must not depend on where the stream is cut."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.engine.reply.reasoning import (
    Split,
    ThinkTagSplitter,
    VllmReasoningSplitter,
    make_splitter,
    reasoning_parser_name,
)

# (stream, prompt already opened <think>, expected thinking, expected answer)
STREAMS = [
    ("<think>\nLet me add 2 and 3.\n</think>\n\nThe sum is 5.", False, "\nLet me add 2 and 3.\n", "The sum is 5."),
    # Only a <think> that starts the reply opens a block: an answer that mentions the tag stays whole.
    ("Sure. <think>plan: be brief</think>Done.", False, "", "Sure. <think>plan: be brief</think>Done."),
    ("\n<think>plan</think>Done.", False, "plan", "Done."),
    ("<think>\nthe model opens it again\n</think>ok", True, "\nthe model opens it again\n", "ok"),
    ("I compute 7*6 = 42.\n</think>\n\n**42**", True, "I compute 7*6 = 42.\n", "**42**"),
    ("<think>this never closes <thi </thin", False, "this never closes <thi </thin", ""),
    ("no tags at all, < think > is not a tag", False, "", "no tags at all, < think > is not a tag"),
    ("a < b and </think> x", True, "a < b and ", " x"),
    ("<think></think>", False, "", ""),
    ("<think>x</think>\n\n\n", False, "x", ""),
]


def run_split(stream: str, cuts: list[int], opened: bool) -> Split:
    splitter = ThinkTagSplitter(prompt_opened_think=opened)
    thinking, answer = [], []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(stream))), len(stream)]
    for start, end in zip(bounds, bounds[1:]):
        part = splitter.feed(stream[start:end])
        thinking.append(part.thinking)
        answer.append(part.answer)
    tail = splitter.flush()
    return Split("".join(thinking) + tail.thinking, "".join(answer) + tail.answer)


def test_known_streams_split_as_expected() -> None:
    for stream, opened, thinking, answer in STREAMS:
        assert run_split(stream, [], opened) == Split(thinking, answer), stream


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(STREAMS), cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=30))
def test_split_is_the_same_wherever_the_stream_is_cut(case: tuple[str, bool, str, str], cuts: list[int]) -> None:
    stream, opened, thinking, answer = case
    assert run_split(stream, cuts, opened) == Split(thinking, answer)


@settings(max_examples=200, deadline=None)
@given(thought=st.text(alphabet="ab<>/thinkTHE \n", max_size=40),
       reply=st.text(alphabet="ab<>/thinkTHE \n", max_size=40),
       cuts=st.lists(st.integers(min_value=0, max_value=120), max_size=40))
def test_random_text_round_trips_through_any_cut(thought: str, reply: str, cuts: list[int]) -> None:
    stream = f"<think>{thought}</think>{reply}"
    whole = run_split(stream, [], False)
    assert run_split(stream, cuts, False) == whole
    # Nothing is lost: the thinking is exactly the text up to the first </think> (a <think> inside it kept),
    # the answer exactly what follows, its leading newlines aside. (A length bound let dropped text pass.)
    body, _, after = stream[len("<think>"):].partition("</think>")
    assert whole == Split(body, after.lstrip("\n"))


def test_in_thinking_tracks_the_tags() -> None:
    splitter = ThinkTagSplitter(prompt_opened_think=True)
    assert splitter.in_thinking
    splitter.feed("reasoning </thi")
    assert splitter.in_thinking
    splitter.feed("nk> answer")
    assert not splitter.in_thinking


def test_parser_names_by_model_family() -> None:
    assert reasoning_parser_name("deepseek-ai/DeepSeek-R1-Distill-Qwen-14B", "qwen2") == "deepseek_r1"
    assert reasoning_parser_name("Qwen/QwQ-32B", "qwen2") == "deepseek_r1"
    assert reasoning_parser_name("Qwen/Qwen3-8B", "qwen3") == "qwen3"
    assert reasoning_parser_name("/models/SmolLM2-135M-Instruct", "llama") is None
    # Qwen3 models that never think are plain chat models, not the qwen3 parser's.
    assert reasoning_parser_name("Qwen/Qwen3-4B-Instruct-2507", "qwen3") is None
    assert reasoning_parser_name("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_moe") is None
    assert reasoning_parser_name("deepseek-ai/DeepSeek-R1-0528-Qwen3-8B", "qwen3") == "deepseek_r1"


def test_vllm_parser_splits_a_real_token_stream() -> None:
    """vLLM's deepseek_r1 parser on a real tokenizer that has the think tokens (SmolLM2's, extended)."""
    from transformers import AutoTokenizer

    from tests.conftest import require_embedded_model

    tokenizer = AutoTokenizer.from_pretrained(str(require_embedded_model()))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<think>", "</think>"]})
    splitter = make_splitter("deepseek_r1", tokenizer, start="open")
    assert isinstance(splitter, VllmReasoningSplitter)
    thinking, answer = [], []
    for token_id in tokenizer.encode("First, 6 times 7 is 42.</think>The answer is 42.", add_special_tokens=False):
        part = splitter.feed(tokenizer.decode([token_id]), [token_id])
        thinking.append(part.thinking)
        answer.append(part.answer)
    assert "".join(thinking).strip() == "First, 6 times 7 is 42."
    assert "".join(answer).strip() == "The answer is 42."
    assert not splitter.in_thinking


def test_family_without_think_tokens_falls_back_to_the_tag_splitter() -> None:
    from transformers import AutoTokenizer

    from tests.conftest import require_embedded_model

    tokenizer = AutoTokenizer.from_pretrained(str(require_embedded_model()))
    assert isinstance(make_splitter("deepseek_r1", tokenizer, start="open"), ThinkTagSplitter)


# ---- the defects the neutral suite found (tests/engine/test_reasoning_suite.py replays it whole) ----------

MENTIONS_THE_TAG = "Qwen wraps its reasoning in <think> tags; the answer follows."


def panes(splitter, deltas: list[str]) -> tuple[str, str]:
    from app.engine.reply.reasoning import ReplyTexts

    texts = ReplyTexts()
    for delta in deltas:
        texts.take("r", splitter.feed(delta))
    texts.take("r", splitter.flush())
    return texts.thinking_text, texts.answer_text


def test_an_answer_that_mentions_the_tag_stays_whole() -> None:
    for start in ("none", "closed"):
        assert panes(ThinkTagSplitter(start=start), [MENTIONS_THE_TAG]) == ("", MENTIONS_THE_TAG)
    reply = ["<think>\nThe user asks about tags.\n</think>\n\n", MENTIONS_THE_TAG]
    assert panes(ThinkTagSplitter(start="none"), reply) == ("The user asks about tags.", MENTIONS_THE_TAG)


def test_the_newline_before_the_closing_tag_is_not_thinking() -> None:
    thought = panes(ThinkTagSplitter(start="open"), ["Six times seven.\n", "\n</think>\n\n42"])
    assert thought == ("Six times seven.", "42")
    # Whitespace inside the thought is kept: only what no thinking follows is dropped.
    assert panes(ThinkTagSplitter(start="open"), ["a\n", "\nb\n", "</think>c"]) == ("a\n\nb", "c")


def test_a_qwen3_reply_with_thinking_off_is_all_answer() -> None:
    """Thinking off renders '<think>\\n\\n</think>\\n\\n' in the prompt: the reply never goes to the qwen3 parser,
    which would take it all for reasoning."""
    from transformers import AutoTokenizer

    from app.engine.reply.reasoning import think_start_of_prompt
    from tests.conftest import require_embedded_model

    tokenizer = AutoTokenizer.from_pretrained(str(require_embedded_model()))
    tokenizer.add_tokens(["<think>", "</think>"])
    start = think_start_of_prompt("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert start == "closed"
    splitter = make_splitter("qwen3", tokenizer, start=start)
    assert panes(splitter, ["Paris is ", "the capital."]) == ("", "Paris is the capital.")
    assert isinstance(make_splitter("qwen3", tokenizer, start="open"), VllmReasoningSplitter)


def test_remote_content_is_not_tag_split_once_the_server_split_the_reasoning() -> None:
    from app.engine.reply.reasoning import RemoteReplySplitter, ReplyTexts

    splitter, texts = RemoteReplySplitter("open"), ReplyTexts()
    for content, reasoning in (("", "The user asks about tags.\n"), ("Qwen wraps its reasoning in <th", ""),
                               ("ink> tags; the answer follows.", "")):
        texts.take("r", splitter.feed(content, reasoning))
    texts.take("r", splitter.flush())
    assert (texts.thinking_text, texts.answer_text) == ("The user asks about tags.", MENTIONS_THE_TAG)
    # A server that passes raw tags through still gets them split.
    raw, texts = RemoteReplySplitter("none"), ReplyTexts()
    for content in ("<think>\nplan\n</thi", "nk>\n\nanswer"):
        texts.take("r", raw.feed(content, ""))
    assert (texts.thinking_text, texts.answer_text) == ("plan", "answer")
