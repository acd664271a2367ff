"""Magistral (Mistral's reasoning line) on Nalar's local path: its [THINK] control tokens split by vLLM's own
`mistral` parser, a prompt that opens no <think>, and a forced end written as its own [/THINK] token.

Magistral's real tokenizer (`tekken.json`, v13) is on the Hugging Face hub only (tests/engine/
test_mistral_tokenizers.py pins why none that mistral_common ships will do), so these tests build a small
tokenizer with the same control tokens. What stays unproven: the real tekken's ids, and mistral_common's chat
rendering of Magistral's system prompt.
"""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from app.core.models.model_families import model_family
from app.core.settings.settings import SamplingConfig
from app.engine.local.reply_prompt import ReplyPrompts
from app.engine.reply.reasoning import THINK_OPEN, VllmReasoningSplitter, make_splitter

CONTROL = ["[INST]", "[/INST]", "[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]"]
WORDS = ["<unk>", "<s>", "</s>", *CONTROL, "What", "is", "2", "+", "?", "Let", "me", "add", ".", "The", "answer", "4"]
TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}[INST]{{ m['content'] }}[/INST]"
            "{% elif m['role'] == 'assistant' %}{{ m['content'] }}</s>{% endif %}{% endfor %}")


def magistral_like_tokenizer() -> PreTrainedTokenizerFast:
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", additional_special_tokens=CONTROL)
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def streamed(splitter: VllmReasoningSplitter | object, tokenizer: PreTrainedTokenizerFast,
             words: list[str]) -> tuple[str, str]:
    thinking = answer = ""
    for word in words:
        token = tokenizer.convert_tokens_to_ids(word)
        split = splitter.feed(word if word in CONTROL else " " + word, [token])  # type: ignore[attr-defined]
        thinking, answer = thinking + split.thinking, answer + split.answer
    rest = splitter.flush()  # type: ignore[attr-defined]
    return (thinking + rest.thinking).strip(), (answer + rest.answer).strip()


def test_magistral_is_its_own_family_split_by_vllms_mistral_parser() -> None:
    """Bug caught: Magistral matched as a plain model, so its whole output, [THINK] markers included, lands in
    the answer pane (README called it out of scope)."""
    family = model_family("mistralai/Magistral-Small-2509", "mistral3")
    assert (family.name, family.thinking, family.parser, family.tool_parser) == (
        "Magistral", "always", "mistral", "mistral")
    assert model_family("mistralai/Mistral-7B-Instruct-v0.3", "mistral").parser is None, "plain Mistral stays plain"


def test_thinking_and_answer_reach_their_panes_through_vllms_parser_token_by_token() -> None:
    """Bugs caught: Nalar's own <think> matcher used for a family whose markers are control tokens (it never
    sees "<think>", so everything goes to the answer); a reply that doesn't think sent to the thinking pane."""
    tokenizer = magistral_like_tokenizer()
    thinks = ["[THINK]", "Let", "me", "add", ".", "[/THINK]", "The", "answer", "is", "4"]
    splitter = make_splitter("mistral", tokenizer, start="open")
    assert isinstance(splitter, VllmReasoningSplitter)
    assert streamed(splitter, tokenizer, thinks) == ("Let me add .", "The answer is 4")
    plain = make_splitter("mistral", tokenizer, start="open")
    assert streamed(plain, tokenizer, ["The", "answer", "is", "4"]) == ("", "The answer is 4")


def test_the_prompt_opens_no_think_block_and_a_forced_end_is_its_own_close_token() -> None:
    """Bugs caught: the prompt ending in a "<think>" Magistral never writes (text, not its control token, so
    the model reads a stray tag); the think budget's forced end written as "</think>" text, which Magistral's
    parser doesn't take for the end of thinking, so the answer would stay in the thinking pane."""
    tokenizer = magistral_like_tokenizer()
    family = model_family("mistralai/Magistral-Small-2509")
    prompts = ReplyPrompts(tokenizer, family, max_model_len=512, reasoning_mode=True)
    sampling = SamplingConfig(think_budget=64, max_tokens=32)
    assert prompts.thinking_on(sampling)
    ids, dropped = prompts.for_reply([{"role": "user", "content": "What is 2 + 2 ?"}], sampling, True, None)
    assert dropped == 0 and ids[-1] == tokenizer.convert_tokens_to_ids("[/INST]")
    assert THINK_OPEN not in tokenizer.decode(ids) and tokenizer.unk_token_id not in ids
    assert prompts.encode(prompts.forced_close) == [tokenizer.convert_tokens_to_ids("[/THINK]")]
    r1 = ReplyPrompts(tokenizer, model_family("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"), 512, True)
    assert r1.forced_close.strip() == "</think>", "the other families keep their text tag"


def test_an_earlier_turns_kept_thinking_is_written_in_its_own_control_tokens() -> None:
    """Bug caught: Magistral's kept thinking written as "<think>…</think>" text, which it reads as words, not
    as the thinking it wrote (its [THINK] tokens)."""
    tokenizer = magistral_like_tokenizer()
    prompts = ReplyPrompts(tokenizer, model_family("mistralai/Magistral-Small-2509"), 512, True)
    messages = [{"role": "user", "content": "What is 2 + 2 ?"},
                {"role": "assistant", "content": "The answer is 4", "kept_thinking": "Let me add ."},
                {"role": "user", "content": "What is 2 + 2 ?"}]
    ids, _ = prompts.for_reply(messages, SamplingConfig(think_budget=64, max_tokens=32), True, None)
    think, close = (tokenizer.convert_tokens_to_ids(t) for t in ("[THINK]", "[/THINK]"))
    assert ids[ids.index(think):ids.index(close) + 1] == [think, *tokenizer.convert_tokens_to_ids(
        ["Let", "me", "add", "."]), close]
    assert tokenizer.unk_token_id not in ids
