"""Nalar's data folder and the files it writes there are the user's alone (0700 and 0600), whoever writes first."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.commands.jobs import report_stem, save_json, sibling
from app.core.settings import paths
from app.engine.machine import orphans


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual desktop umask (022), under which mkdir and open give 0755 and 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_engine_records_written_first_leave_the_data_dir_and_the_record_private(open_umask: None) -> None:
    """Bug caught: the engine's process record was the first thing written on a fresh machine, with
    mkdir(parents=True) and write_text: the data dir (conversations, keys' names) came out 0755 and the record
    (pids of the user's engine) 0644."""
    assert not paths.data_dir().exists()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert orphans.record_engine_processes() >= 1
        records = list(orphans.records_dir().glob("*.json"))
        assert records and all(mode(record) == 0o600 for record in records)
        assert mode(orphans.records_dir()) == 0o700 and mode(paths.data_dir()) == 0o700
    finally:
        child.communicate(b"", timeout=30)
    orphans.record_engine_processes()


def test_bench_reports_are_private_and_an_old_readable_report_is_made_private(open_umask: None) -> None:
    """Bug caught: `nalar bench` saved its reports (the machine's description, model paths) 0644 in a 0755
    folder under the data dir."""
    stem = report_stem("bench", "fp8")
    target = sibling(stem, ".json")
    target.write_text("{}")
    target.chmod(0o644)  # as an older Nalar left it
    save_json(target, {"rows": []})
    assert mode(target) == 0o600 and mode(stem.parent) == 0o700 and mode(paths.data_dir()) == 0o700


def test_private_dir_makes_only_the_folders_it_created_private(tmp_path: Path, open_umask: None) -> None:
    """Bug caught: private_dir chmods an existing parent it did not create (the user's own folder), or leaves
    the ones it created on the way 0755."""
    existing = tmp_path / "home"
    existing.mkdir()
    paths.private_dir(existing / "a" / "b")
    assert mode(existing) == 0o755
    assert mode(existing / "a") == 0o700 and mode(existing / "a" / "b") == 0o700
