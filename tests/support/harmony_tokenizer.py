"""gpt-oss's real tokenizer, built offline from the o200k vocabulary that ``openai_harmony`` embeds.

gpt-oss's hub repo ships its tokenizer as a ``tokenizer.json`` converted from tiktoken's ``o200k_harmony``.
The same conversion is done here, with no download: ``openai_harmony``'s encoding gives each ordinary
token's bytes (ids 0..199997, the rank order tiktoken's BPE files use), the file written from them is
checked against o200k_base's published sha256, tiktoken's own ``o200k_harmony`` constructor reads it
from tiktoken's cache (for the split pattern), and transformers' ``TikTokenConverter`` turns it into a
fast tokenizer with Harmony's 1,091 special tokens at their ids. Token ids therefore match the
fixtures' recorded ``output_token_ids`` and the ids vLLM's Harmony parser reads.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
ORDINARY_TOKENS = 199998  # o200k_base's BPE ranks; ids from 199998 on are special


def _harmony_encoding() -> Any:
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def write_o200k(path: Path) -> Path:
    """o200k_base.tiktoken (base64 bytes, rank per line) from openai_harmony's embedded vocabulary."""
    inner = _harmony_encoding()._inner
    lines = [f"{base64.b64encode(bytes(inner.decode_bytes([i]))).decode()} {i}" for i in range(ORDINARY_TOKENS)]
    path.write_text("\n".join(lines) + "\n")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == O200K_SHA256, f"o200k rebuilt from openai_harmony has sha256 {digest}, not {O200K_SHA256}"
    return path


def _cache_key() -> str:
    """This file and the versions of the packages the conversion reads: a change to either builds it anew."""
    from importlib.metadata import packages_distributions, version

    digest = hashlib.sha256(Path(__file__).read_bytes())
    owners = packages_distributions()  # openai_harmony's distribution is oss-harmony here
    for module in ("openai_harmony", "tiktoken", "transformers", "tokenizers"):
        for dist in owners.get(module, [module]):
            digest.update(f"{dist}={version(dist)}".encode())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=None)
def harmony_tokenizer_folder() -> Path:
    """A tokenizer folder (tokenizer.json, its config, a gpt_oss config.json) that vLLM's get_tokenizer loads.

    The conversion takes 8 s (half a minute on a busy machine), and each xdist worker that met a gpt-oss test
    paid it again: it is built once and kept beside the embedded model (as mypy's cache is), under a key of this
    file and the converting packages' versions. It is moved into place whole, so a worker sees all of it or none.
    """
    from tests.conftest import WHEEL_DIR

    cache = WHEEL_DIR.parent / "harmony-tokenizer"
    kept = cache / _cache_key()
    if not (kept / "gpt-oss-tokenizer" / "config.json").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="building-", dir=cache))
        atexit.register(shutil.rmtree, work, True)
        build_harmony_tokenizer(work)
        shutil.rmtree(work / "tiktoken-cache")
        try:
            work.rename(kept)
        except OSError:  # another worker moved its copy in first: the same files
            pass
    return kept / "gpt-oss-tokenizer"


def build_harmony_tokenizer(root: Path) -> Path:
    import json

    import tiktoken_ext.openai_public as openai_public
    import transformers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    cache = root / "tiktoken-cache"
    cache.mkdir(parents=True, exist_ok=True)
    # tiktoken's cache key for a URL is its sha1; with the file there, o200k_base() reads it instead of fetching
    vocab = write_o200k(cache / hashlib.sha1(O200K_URL.encode()).hexdigest())
    saved = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        pattern = openai_public.o200k_harmony()["pat_str"]
    finally:
        if saved is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR", None)
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = saved
    encoding = _harmony_encoding()
    specials = sorted((encoding.encode(s, allowed_special="all")[0], s) for s in encoding.special_tokens_set)
    assert [i for i, _ in specials] == list(range(ORDINARY_TOKENS, ORDINARY_TOKENS + len(specials)))
    converted = TikTokenConverter(vocab_file=str(vocab), pattern=pattern,
                                  extra_special_tokens=[s for _, s in specials]).converted()
    tok = PreTrainedTokenizerFast(tokenizer_object=converted, bos_token="<|startoftext|>",
                                  eos_token="<|return|>", pad_token="<|endoftext|>")
    folder = root / "gpt-oss-tokenizer"
    tok.save_pretrained(folder)
    # The special tokens in tokenizer_config.json too, as the hub repo has them: without them transformers
    # parses the whole 28 MB tokenizer.json in Python at every load, only to find them (a second of each load).
    config = json.loads((folder / "tokenizer_config.json").read_text())
    added = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    config["added_tokens_decoder"] = {str(token.pop("id")): token for token in added}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"],
                                                   "transformers_version": transformers.__version__}))
    return folder


@lru_cache(maxsize=None)
def gpt_oss_tokenizer() -> Any:
    """vLLM's tokenizer over the rebuilt gpt-oss tokenizer, as EngineHost would load the model's."""
    from vllm.tokenizers import registry

    return registry.get_tokenizer(str(harmony_tokenizer_folder()), trust_remote_code=False)


def harmony_script(raw: str, group: int = 2, **options: Any) -> Any:
    """A scripted gpt-oss reply: ``raw`` Harmony (markers as special tokens) as token ids in deltas of ``group``,
    each with its text as the detokenizer keeps it, played through the gpt-oss family's splitter and gate."""
    from app.core.models.model_families import model_family
    from app.engine.scripted import Script

    tok = gpt_oss_tokenizer()
    ids = tok.encode(raw, add_special_tokens=False)
    groups = [ids[i:i + group] for i in range(0, len(ids), group)]
    return Script([tok.decode(g) for g in groups], token_ids=groups, family=model_family("openai/gpt-oss-20b"),
                  tokenizer=tok, **options)


# A call and the answer after its result, as gpt-oss writes them (the call's header in the form vLLM's prompt
# renders earlier calls in, which the model echoes).
CALL_ADD = ("<|channel|>analysis<|message|>They want 20+22. I will use add.<|end|>"
            "<|start|>assistant to=functions.add<|channel|>commentary <|constrain|>json"
            '<|message|>{"a": 20, "b": 22}<|call|>')
ANSWER_42 = ("<|channel|>analysis<|message|>The tool says 42.<|end|>"
             "<|start|>assistant<|channel|>final<|message|>The sum is **42**.<|return|>")
