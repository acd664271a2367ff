"""canitoolcall 0.1.1's offline fixtures, all 469, side by side: its own vLLM adapter and Nalar's tool path.

One item per family runs every fixture of the family through both with canitoolcall's own replay (one plain
parse, one stream per default chunking strategy) and its own checks; a fixture passes when its case passes (or
soft-passes) every check. vLLM's side is kept between runs under a key of everything it reads
(tests/support/tool_fixture_reference.py): any change to vLLM, canitoolcall, the tokenizers or the harness runs it
again. Nalar must pass at least as many as vLLM's
adapter, and at least its floor. Both sides use the same tokenizer: gpt-oss's real one, rebuilt offline, and a
stand-in for the others (tests/support/tool_fixture_sides.py says what that is, and which families need the
real tokenizer instead). gpt-oss, measured: vLLM 48 of 51, Nalar 49 (vllm-malformed-headers: vLLM's stream
drops a newline its plain parse keeps); both fail the two replies cut inside a call's header or arguments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("canitoolcall")
from tests.support.tool_fixture_sides import NEEDS_REAL_TOKENIZER, run_family

# family → fixtures Nalar's path passes (measured; raise when it gets better). Every check counts, over all
# of a family's fixtures: the floors before the side-by-side counted tool-call matches only, without
# a tokenizer, so they are not comparable with these.
FLOORS = {"qwen3-hermes": 48, "qwen3-xml": 49, "glm": 44, "kimi": 43, "deepseek": 66, "gemma4": 32, "llama": 33,
          "gpt-oss": 49}
FAMILIES = sorted([*FLOORS, *NEEDS_REAL_TOKENIZER])


@pytest.mark.parametrize("family", FAMILIES)
def test_nalar_passes_canitoolcall_fixtures_at_least_as_well_as_vllm(family: str, monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """Bug caught: a change to the gate (markers, held text, framed answers, calls inside thinking), to the
    splitters or to a family's parser choice that makes Nalar's API output worse than vLLM's own parsers on
    some family; the failure names every fixture vLLM passes and Nalar doesn't, with Nalar's failing check."""
    if family in NEEDS_REAL_TOKENIZER:
        pytest.skip(f"{family}: needs the real tokenizer: {NEEDS_REAL_TOKENIZER[family]}")
    sides = run_family(family, monkeypatch, tmp_path)
    vllm, nalar = sides["vllm"], sides["nalar"]
    print(f"\n{family}: {nalar.fixtures} fixtures, vLLM adapter {len(vllm.passed)}, Nalar {len(nalar.passed)}; "
          f"Nalar only: {sorted(set(nalar.passed) - set(vllm.passed))}; "
          f"vLLM only: {sorted(set(vllm.passed) - set(nalar.passed))}")
    assert not vllm.prompt_mismatch and len(vllm.prompt_matched) == vllm.fixtures, \
        f"{family}: the stand-in's prompt must end with each fixture's generation prompt: {vllm.prompt_mismatch}"
    lost = {fid: nalar.failed.get(fid, "?") for fid in vllm.passed if fid not in nalar.passed}
    assert len(nalar.passed) >= len(vllm.passed), f"{family}: Nalar {len(nalar.passed)} < vLLM {len(vllm.passed)}; " \
                                                  f"vLLM passes, Nalar fails: {lost}"
    assert len(nalar.passed) >= FLOORS[family], f"{family}: {len(nalar.passed)} passed, floor {FLOORS[family]}; " \
                                                f"failing: {nalar.failed}"


def test_the_kept_reference_is_read_back_whole_and_keyed_by_the_packages_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bugs caught: a reference kept from before a vLLM or canitoolcall upgrade (its files not in the key), so
    Nalar is held to another vLLM's results; a key that changed with every fresh venv (the installer's own lines
    of RECORD in it), so nothing was ever reused; a tally whose fixtures crashed in the harness kept."""
    from tests.support import tool_fixture_reference as reference
    from tests.support.tool_fixture_sides import FamilyTally

    monkeypatch.setattr("tests.conftest.WHEEL_DIR", tmp_path / "downloads")
    tally = FamilyTally(fixtures=2, passed=["a"], failed={"b": "tool_calls[one]: no call"}, prompt_matched=["a", "b"])
    reference.keep_tally("test-family", tally)
    assert reference.kept_tally("test-family") == tally
    reference.keep_tally("crashed", FamilyTally(fixtures=1, failed={"c": "harness: KeyError: 'x'"}))
    assert reference.kept_tally("crashed") is None

    key = reference._inputs_digest()
    real = reference.distribution

    def installed(extra: str) -> type:
        class Installed:  # the same distribution, its RECORD with one more line
            def __init__(self, name: str) -> None:
                self.inner = real(name)

            def read_text(self, filename: str) -> str | None:
                text = self.inner.read_text(filename)
                return (text or "") + extra if filename == "RECORD" else text

        return Installed

    try:
        for extra, same in (("../../../bin/vllm,sha256=other-launcher,311\nvllm-0.dist-info/INSTALLER,sha256=uv,2\n"
                             "vllm/__pycache__/envs.cpython-311.pyc,,\n", True),
                            ("vllm/parser/qwen3.py,sha256=changed,1\n", False)):
            monkeypatch.setattr(reference, "distribution", installed(extra))
            reference._inputs_digest.cache_clear()
            assert (reference._inputs_digest() == key) is same, extra
            assert (reference.kept_tally("test-family") == tally) is same
    finally:
        reference._inputs_digest.cache_clear()
