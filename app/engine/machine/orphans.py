"""Find and end engine processes left behind by a Nalar that died.

vLLM's EngineCore can outlive a parent killed with SIGKILL (vllm issue #55510) and keep
its memory. Two marks tell our processes from anyone else's, never the name alone:

* After each engine start, Nalar records its engine processes (pid and start time) in
  ``<data dir>/engines/<owner>.json``, where owner is "<pid>-<start time>" of that Nalar.
* Every engine process also inherits NALAR_ENGINE_OWNER, and NALAR_ENGINE_DATA (the data
  dir, so a Nalar ends only its own data dir's leftovers, as it reads only its own records:
  another profile's, or a parallel test's, are that one's to end). vLLM renames its processes with
  setproctitle, which overwrites /proc/<pid>/environ, so this mark only survives on the
  helpers it doesn't rename (such as multiprocessing's resource tracker).

A marked process whose owner is gone, and whose start time still matches (so a reused pid
is never hit), is an orphan.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from pathlib import Path

import psutil

from app.core.settings import paths

log = logging.getLogger(__name__)

OWNER_ENV = "NALAR_ENGINE_OWNER"
DATA_ENV = "NALAR_ENGINE_DATA"


def owner_tag(process: psutil.Process | None = None) -> str:
    process = process or psutil.Process()
    return f"{process.pid}:{process.create_time():.2f}"


def owner_environment(tag: str | None = None) -> dict[str, str]:
    """The marks an engine process inherits: its owner (``tag``, this process by default) and data dir."""
    return {OWNER_ENV: tag or owner_tag(), DATA_ENV: str(paths.data_dir())}


def _owner_alive(tag: str) -> bool:
    """True while the Nalar that wrote ``tag`` runs. A zombie is dead: a killed app stays one
    until its parent (a launcher, a shell, a PID 1 that doesn't reap) gets round to it."""
    pid_text, _, created = tag.partition(":")
    try:
        owner = psutil.Process(int(pid_text))
        return owner_tag(owner) == f"{pid_text}:{float(created):.2f}" and owner.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ValueError):
        return False


def records_dir() -> Path:
    return paths.data_dir() / "engines"


def _record_path(tag: str) -> Path:
    return records_dir() / (tag.replace(":", "-") + ".json")


def record_engine_processes() -> int:
    """Write down this process's engine children; call after each engine start and stop.

    With no children left the record is removed: a clean shutdown leaves nothing to clean up.
    """
    me = psutil.Process()
    children = []
    for child in me.children(recursive=True):
        try:
            children.append({"pid": child.pid, "create_time": round(child.create_time(), 2), "name": child.name()})
        except psutil.NoSuchProcess:
            continue
    path = _record_path(owner_tag(me))
    if not children:
        path.unlink(missing_ok=True)
        return 0
    tmp = paths.write_private_text(path.with_suffix(".tmp"), json.dumps({"owner": owner_tag(me),
                                                                        "processes": children}))
    tmp.replace(path)
    return len(children)


def same_process(pid: int, create_time: float) -> psutil.Process | None:
    """The process with this pid, if it is still the one that started at ``create_time``."""
    try:
        proc = psutil.Process(pid)
        return proc if round(proc.create_time(), 2) == round(create_time, 2) else None
    except psutil.NoSuchProcess:
        return None


def _is_resource_tracker(proc: psutil.Process) -> bool:
    """multiprocessing's helper lives as long as we do, not as long as an engine."""
    try:
        return "resource_tracker" in " ".join(proc.cmdline())
    except psutil.Error:
        return True


def children_since(before: set[int]) -> list[psutil.Process]:
    """This process's children whose pids are not in ``before``: what an engine start added."""
    return [p for p in psutil.Process().children(recursive=True)
            if p.pid not in before and not _is_resource_tracker(p)]


def tagged_processes(owner: str | None = None) -> list[psutil.Process]:
    """Processes whose environment carries an owner tag (``owner`` to pick one), this one excluded."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            tag = proc.environ().get(OWNER_ENV)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
        if tag and (owner is None or tag == owner):
            found.append(proc)
    return found


def other_owners_recorded() -> bool:
    """Whether another Nalar's engine record exists: its owner may still die and leave orphans.

    Records of this process and of its ancestors don't count: the engine process's window is its parent.
    """
    me = psutil.Process()
    ours = {_record_path(owner_tag(process)).name for process in [me, *me.parents()]}
    return records_dir().exists() and any(r.name not in ours for r in records_dir().glob("*.json"))


def find_orphans() -> tuple[list[psutil.Process], list[Path]]:
    """Orphaned engine processes, and the record files of dead owners (to delete once handled)."""
    orphans: dict[int, psutil.Process] = {}
    stale_records = []
    for record in sorted(records_dir().glob("*.json")) if records_dir().exists() else []:
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            stale_records.append(record)
            continue
        if _owner_alive(data.get("owner", "")):
            continue
        stale_records.append(record)
        for entry in data.get("processes", []):
            proc = same_process(int(entry["pid"]), float(entry["create_time"]))
            if proc is not None:
                orphans[proc.pid] = proc
    ours = str(paths.data_dir())
    for proc in tagged_processes():
        try:
            environ = proc.environ()
            if environ.get(DATA_ENV, ours) != ours:
                continue  # another data dir's: its Nalar ends it
            if not _owner_alive(environ[OWNER_ENV]):
                orphans[proc.pid] = proc
        except (psutil.Error, KeyError, OSError):
            continue
    return list(orphans.values()), stale_records


def end_orphans(timeout: float = 5.0) -> int:
    """Terminate orphaned engine processes, then kill what ignores SIGTERM. Returns how many."""
    orphans, stale_records = find_orphans()
    for proc in orphans:
        try:
            log.warning("ending orphaned engine process %d (%s) left by a crashed Nalar", proc.pid, proc.name())
            proc.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(orphans, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=timeout)
    for record in stale_records:
        record.unlink(missing_ok=True)
    return len(orphans)


def end_processes(procs: list[psutil.Process], why: str) -> None:
    """Kill ``procs`` (our own, found by pid and start time) and wait for them; ``why`` logs how many, as %d."""
    if not procs:
        return
    log.info(why, len(procs))
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)


ORPHAN_RECHECK_S = 5.0


class OrphanWatch:
    """While another Nalar's record is left, search again every few seconds: a crashed run whose parent
    hasn't reaped it yet, or one that dies later, must not keep its engine (and VRAM). On an asyncio loop."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """On the loop; a watch already running goes on."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._watch())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while await loop.run_in_executor(None, other_owners_recorded):
            await asyncio.sleep(ORPHAN_RECHECK_S)
            await loop.run_in_executor(None, end_orphans)  # it logs what it ends
