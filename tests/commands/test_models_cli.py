"""`nalar models search|list|rm` against the fake hub: one real `nalar` child process (a child costs about a
second here), the rest in-process, where search reads HF_ENDPOINT as in a terminal and the verdicts use a fixed
budget so they don't depend on this machine."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.commands.models.models_cli import run_list, run_rm, run_search
from app.core.models.hub_download import HubDownload, download_dir
from tests.core.hub import conftest as hub_fixtures
from tests.core.hub.conftest import GPU_16, sparse_model_folder
from tests.support.hub_server import LocalHub

hub, closed_port = hub_fixtures.hub, hub_fixtures.closed_port  # the fake hub's fixtures, shared with tests/core/hub

ROOT = Path(__file__).resolve().parents[2]


def nalar(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", "models", *args], cwd=ROOT, capture_output=True, text=True,
                          input=stdin, timeout=120)


def test_search_json_and_lines_with_each_file_set(hub: LocalHub, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches a search whose JSON lacks a file set's weights, fit or contexts, a line per result that drops
    the verdict, and --only-fits keeping a model no set of which fits (a fixed 16 GiB budget)."""
    assert run_search("r1-distill", as_json=True, budget=GPU_16) == 0  # the hub: HF_ENDPOINT, set by the fixture
    rows = {row["repo_id"]: row for row in json.loads(capsys.readouterr().out)}
    fits = rows["acme/R1-Distill-7B-fits"]["file_sets"][0]
    assert fits["weights_bytes"] == int(5e9) and fits["fits"] == "fits" and fits["max_context_fp8"] > 32768
    assert rows["acme/R1-Distill-7B-huge"]["file_sets"][0]["verdict"].startswith("doesn't fit (needs ")
    assert {s["label"] for s in rows["acme/R1-Distill-7B-multi"]["file_sets"]} >= {"bf16", "GGUF Q4_K_M"}
    assert run_search("r1-distill", only_fits=True, budget=GPU_16) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" · ")[0] for line in lines] == ["acme/R1-Distill-7B-fits", "acme/R1-Distill-7B-tight",
                                                        "acme/R1-Distill-7B-multi"]
    assert "bf16 4.7 GiB: fits (fp8 " in lines[0] and "fits with context " in lines[1]


def test_models_list_in_a_child_process(hub: LocalHub) -> None:
    """Catches the `models` family missing from `nalar`'s parser, or a terminal list that doesn't see the
    downloads the window made (the same XDG folders)."""
    HubDownload("acme/small-a", endpoint=hub.endpoint).run()
    listed = nalar("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [e["model_id"] for e in json.loads(listed.stdout) if e["source"] == "nalar"] == ["acme/small-a"]


def test_list_and_rm_ask_first_and_say_the_bytes_freed(hub: LocalHub, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Catches a list that the downloads don't reach, an rm that deletes without asking (or when the answer is
    no), one that doesn't say the bytes freed, and an unknown id answered with exit code 0."""
    HubDownload("acme/small-a", endpoint=hub.endpoint).run()
    assert run_list() == 0
    assert "acme/small-a · nalar · 3.1 MB · never used" in capsys.readouterr().out
    assert run_list(as_json=True) == 0
    mine = [e for e in json.loads(capsys.readouterr().out) if e["model_id"] == "acme/small-a"]
    assert mine and mine[0]["source"] == "nalar" and mine[0]["size_bytes"] > 3_000_000 and mine[0]["problem"] is None
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    assert run_rm("acme/small-a") == 0
    assert "[y/N]" in capsys.readouterr().err and download_dir("acme/small-a").exists()
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert run_rm("acme/small-a") == 0
    assert "freed 3.1 MB" in capsys.readouterr().err
    assert not download_dir("acme/small-a").exists()
    assert run_rm("acme/small-a", yes=True) == 1


def test_offline_search_fails_at_once_naming_the_endpoint(closed_port: str, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Catches a terminal search that hangs on retries or prints a traceback when the hub can't be reached."""
    monkeypatch.setenv("HF_ENDPOINT", closed_port)
    assert run_search("qwen3", budget=GPU_16) == 1
    assert closed_port in capsys.readouterr().err


def test_list_json_gives_each_entry_its_verdict_offline(closed_port: str, monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches `models list --json` without a verdict per entry, or one asked of the hub (a folder you added and
    an offline hub gave none): fits and the max context at fp8 and bf16, from the folder's own files."""
    from app.core.hub.library import ModelLibrary, default_state_file

    monkeypatch.setenv("HF_ENDPOINT", closed_port)
    folder = sparse_model_folder(tmp_path / "my-qwen", int(1.2e9))
    ModelLibrary(default_state_file()).add_folder(folder)
    assert run_list(as_json=True, budget=GPU_16) == 0
    mine = next(e for e in json.loads(capsys.readouterr().out) if e["path"] == str(folder))
    verdict = mine["verdict"]
    assert verdict["fits"] == "fits" and verdict["text"] == "fits", verdict
    assert verdict["max_context_fp8"] >= verdict["max_context_bf16"] > 0
    assert run_list(budget=GPU_16) == 0
    assert " · never used · fits · " in capsys.readouterr().out
