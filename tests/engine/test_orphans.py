"""Orphan cleanup on real processes: only ours, only orphaned, never by name alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from app.engine.machine.orphans import DATA_ENV, OWNER_ENV, end_orphans, find_orphans, owner_environment, owner_tag

SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]  # ok-sleep: the child idles, the test doesn't wait


def spawn(tag: str | None, argv0: str | None = None, data_dir: str | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in (OWNER_ENV, DATA_ENV)}
    if tag:
        env.update(owner_environment(tag))
    if data_dir:
        env[DATA_ENV] = data_dir
    args = ["bash", "-c", f'exec -a "{argv0}" ' + " ".join(f"'{a}'" for a in SLEEPER)] if argv0 else SLEEPER
    proc = subprocess.Popen(args, env=env)
    psutil.Process(proc.pid).environ()  # wait until the process exists with its environment
    return proc


def test_only_processes_of_a_dead_owner_are_ended(tmp_path: Path) -> None:
    """Bugs caught: any tagged process ended, whoever its owner; and a dead owner's engine of another data
    dir ended too (a parallel test's planted orphan, or another profile's, which its own Nalar ends and
    counts: CI's orphan test once found its orphan already gone so)."""
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner.wait()
    dead_tag = f"{dead_owner.pid}:{psutil.Process().create_time() - 1000:.2f}"  # gone, or a different process
    orphan = spawn(dead_tag, argv0="VLLM::EngineCore")
    live_owned = spawn(owner_tag())  # a running Nalar's engine (here: ours)
    untagged = spawn(None, argv0="VLLM::EngineCore")  # someone else's vLLM: same name, no tag
    elsewhere = spawn(dead_tag, argv0="VLLM::EngineCore", data_dir=str(tmp_path))  # another data dir's
    try:
        found = {p.pid for p in find_orphans()[0]}
        assert orphan.pid in found
        assert {live_owned.pid, untagged.pid, elsewhere.pid}.isdisjoint(found)
        assert end_orphans(timeout=5) >= 1
        assert orphan.wait(10) is not None
        assert live_owned.poll() is None and untagged.poll() is None and elsewhere.poll() is None
    finally:
        for proc in (orphan, live_owned, untagged, elsewhere):
            proc.kill()
            proc.wait()


def test_recorded_processes_of_a_dead_owner_are_ended_but_a_reused_pid_is_not() -> None:
    import json

    from app.engine.machine.orphans import records_dir

    orphan = spawn(None, argv0="VLLM::EngineCore")  # renamed like vLLM's: no environment mark to read
    bystander = spawn(None)
    try:
        records_dir().mkdir(parents=True, exist_ok=True)
        record = records_dir() / "999999-1.00.json"
        record.write_text(json.dumps({"owner": "999999:1.00", "processes": [
            {"pid": orphan.pid, "create_time": psutil.Process(orphan.pid).create_time(), "name": "VLLM::EngineCore"},
            # The same pid number with another start time is a different, innocent process.
            {"pid": bystander.pid, "create_time": psutil.Process(bystander.pid).create_time() - 50, "name": "x"},
        ]}))
        assert end_orphans(timeout=5) == 1
        assert orphan.wait(10) is not None and bystander.poll() is None
        assert not record.exists()
    finally:
        for proc in (orphan, bystander):
            proc.kill()
            proc.wait()


def test_an_unreaped_killed_owner_counts_as_dead() -> None:
    """The app SIGKILLed and its parent not reaping it yet (a zombie): its engine is an orphan now,
    not when the parent gets round to it. Bug caught: a zombie's pid and start time still match."""
    import json
    import signal

    from app.engine.machine.orphans import other_owners_recorded, records_dir

    owner = subprocess.Popen(SLEEPER)  # stands in for the app; we are its parent and don't reap it
    engine = spawn(None, argv0="VLLM::EngineCore")
    try:
        tag = owner_tag(psutil.Process(owner.pid))
        records_dir().mkdir(parents=True, exist_ok=True)
        record = records_dir() / (tag.replace(":", "-") + ".json")
        record.write_text(json.dumps({"owner": tag, "processes": [
            {"pid": engine.pid, "create_time": psutil.Process(engine.pid).create_time(), "name": "VLLM::EngineCore"}]}))
        assert engine.pid not in {p.pid for p in find_orphans()[0]}, "a live owner's engine is not an orphan"
        assert other_owners_recorded()
        os.kill(owner.pid, signal.SIGKILL)  # and not reaped: owner.wait() comes only in finally
        killed = psutil.Process(owner.pid)
        deadline = time.monotonic() + 10
        while killed.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:  # SIGKILL lands async
            pass
        assert killed.status() == psutil.STATUS_ZOMBIE
        assert end_orphans(timeout=5) == 1
        assert engine.wait(10) is not None
        assert not record.exists() and not other_owners_recorded()
    finally:
        for proc in (owner, engine):
            proc.kill()
            proc.wait()
