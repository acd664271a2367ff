"""Model downloads through huggingface_hub against a real HTTP hub on 127.0.0.1 (tests/support/hub_server.py).

The repository served is the real embedded model folder (270 MB of safetensors), throttled so a
cancel lands mid-file; the resumed run must ask only for the remainder (a Range request).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from app.core.models.embedded_model import verify
from app.core.models.hub_download import (
    CANCEL_WITHIN_BYTES,
    PARTIAL_DIR,
    DownloadCancelled,
    DownloadError,
    DownloadProgress,
    HubDownload,
    check_reachable,
    describe,
    download_dir,
    is_complete,
    partial_bytes,
)
from app.core.settings import paths
from app.core.settings.settings import load_settings
from tests.conftest import require_embedded_model
from tests.support.hub_server import HubRepo, LocalHub

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture
def hub() -> LocalHub:
    with LocalHub([HubRepo.from_folder(REPO, require_embedded_model())]) as server:
        yield server


def test_progress_cancel_mid_file_and_resume_after_restart(hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    # HF_ENDPOINT is how users point Nalar at a mirror; it is read per download, not at import.
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    weights = require_embedded_model() / "model.safetensors"
    size = weights.stat().st_size
    hub.throttle_bytes_per_s = 25e6
    seen: list[DownloadProgress] = []
    first = HubDownload(REPO, on_progress=seen.append)
    assert first.endpoint == hub.endpoint

    seen_at: list[float] = []
    test_started = time.monotonic()

    def cancel_mid_weights(progress: DownloadProgress) -> None:
        seen.append(progress)
        seen_at.append(time.monotonic())
        if progress.filename == "model.safetensors" and progress.done_bytes > 30e6:
            first.cancel()

    first.on_progress = cancel_mid_weights
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: _run_into(first, outcome))
    worker.start()
    worker.join(120)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], DownloadCancelled), outcome

    target = download_dir(REPO)
    assert target.is_relative_to(paths.cache_dir())
    total = sum(p.stat().st_size for p in require_embedded_model().iterdir())
    assert {p.total_bytes for p in seen} == {total}
    done = [p.done_bytes for p in seen]
    assert done == sorted(done) and 30e6 < done[-1] < total
    moving = [p for p in seen if p.bytes_per_s > 0]
    assert moving and all(p.eta_s is not None and p.eta_s > 0 for p in moving)
    # The speed is measured, whatever the load: at most the server's 25 MB/s throttle (with slack), at least
    # the bytes over the time since this test began (the download's own clock starts later), and the ETA is
    # what is left at that speed. (A 5 MB/s floor failed on a loaded machine.)
    last, last_at = moving[-1], seen_at[seen.index(moving[-1])]
    assert last.done_bytes / (last_at - test_started) <= last.bytes_per_s < 40e6
    assert last.eta_s == pytest.approx((last.total_bytes - last.done_bytes) / last.bytes_per_s, rel=1e-6)
    assert "MB/s" in describe(moving[-1]) and "left" in describe(moving[-1])
    partial = next((target / PARTIAL_DIR).glob("model.safetensors.*.incomplete"))
    kept = partial.stat().st_size
    assert 30e6 < kept < size
    assert not is_complete(target)
    assert partial_bytes(REPO) >= kept

    # "Restart": a new object, full speed. Only the remainder of the weights crosses the wire.
    hub.throttle_bytes_per_s = None
    resumed: list[DownloadProgress] = []
    folder = HubDownload(REPO, on_progress=resumed.append).run()
    assert folder == target and is_complete(folder)
    requests = hub.file_requests("model.safetensors")
    assert [(r.range_start, r.status) for r in requests] == [(0, 200), (kept, 206)]
    assert requests[1].bytes_sent == size - kept
    assert all(len(hub.file_requests(name)) == 1 for name in ("config.json", "tokenizer.json"))
    assert resumed[0].done_bytes >= kept and resumed[-1].done_bytes == total
    assert verify(folder, deep=True), "every file matches the source's sha256 manifest"
    assert not (folder / PARTIAL_DIR).exists()
    # A third run has nothing to do.
    before = len(hub.requests)
    assert HubDownload(REPO).run() == folder and len(hub.requests) == before


def _run_into(download: HubDownload, outcome: list[BaseException]) -> None:
    try:
        download.run()
    except BaseException as exc:  # noqa: BLE001 - the test inspects what ended the run
        outcome.append(exc)


def test_a_cancel_lands_within_a_megabyte_and_keeps_what_arrived(hub: LocalHub,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: huggingface_hub reads 10 MB before it reports, and a cancel lands only at a report: 10 s on a
    1 MB/s line (the end of the file, for a smaller one), and the bytes of that unreported chunk thrown away."""
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    hub.hold_at_bytes = 3 * CANCEL_WITHIN_BYTES  # the weights' body stops there until released
    download = HubDownload(REPO)
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: _run_into(download, outcome))
    worker.start()
    partials = download_dir(REPO) / PARTIAL_DIR

    def weights_written() -> int:
        return sum(p.stat().st_size for p in partials.glob("model.safetensors.*.incomplete"))

    try:
        assert hub.held.wait(60), "the weights' transfer never reached the hold"
        deadline = time.monotonic() + 60
        while weights_written() < 2 * CANCEL_WITHIN_BYTES:  # the client has read past the first two megabytes
            assert time.monotonic() < deadline and worker.is_alive(), f"{weights_written()} bytes written"
            hub.release.wait(0.02)
        download.cancel()
    finally:
        hub.release.set()
        worker.join(120)
    assert not worker.is_alive() and len(outcome) == 1 and isinstance(outcome[0], DownloadCancelled), outcome
    assert 2 * CANCEL_WITHIN_BYTES <= weights_written() <= 3 * CANCEL_WITHIN_BYTES, \
        "the megabytes read before the cancel are kept, the one read after it is not"


def test_unknown_repo_and_unreachable_hub_get_clear_messages(hub: LocalHub) -> None:
    with pytest.raises(DownloadError, match="not found on .*Fix: check the model id"):
        HubDownload("nobody/no-such-model", endpoint=hub.endpoint).run()

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(DownloadError, match=r"Could not reach http://127\.0\.0\.1:\d+ .*resumes where it stopped"):
        HubDownload(REPO, endpoint=dead).run()
    assert check_reachable(dead) is not None and "can't be reached" in check_reachable(dead)
    assert check_reachable(hub.endpoint) is None


def test_repo_without_safetensors_is_refused(tmp_path, hub: LocalHub) -> None:
    folder = tmp_path / "pickles"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 10)
    with LocalHub([HubRepo.from_folder("someone/pickled", folder)]) as other:
        with pytest.raises(DownloadError, match="no config.json and safetensors"):
            HubDownload("someone/pickled", endpoint=other.endpoint).run()


def test_nalar_download_interrupted_then_rerun_resumes_in_a_new_process(hub: LocalHub, tmp_path) -> None:
    """Resume after a real restart: Ctrl-C ends the first process, a second one asks for the rest.

    The hub holds the body at 24 MB until the first process has ended, so the Ctrl-C surely lands mid-download:
    with a throttle alone, the first process sometimes finished (exit 0) before the signal, on a busy machine."""
    env = dict(os.environ, HF_ENDPOINT=hub.endpoint)  # read fresh by the new process, as a user would set it
    command = [sys.executable, "-m", "app", "download", REPO, "--use"]
    hub.hold_at_bytes = 24_000_000
    # As from a terminal: SIGINT at its default. A suite started in the background (`make test &`, a CI runner)
    # hands its children SIGINT ignored, and the first download then never stopped: it hung on the held body.
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        partial_dir = download_dir(REPO) / PARTIAL_DIR
        deadline = time.monotonic() + 120
        while not (hub.held.is_set() and any(p.stat().st_size > 20e6 for p in partial_dir.glob("model.safetensors.*"))):
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.1)  # ok-sleep: watching another process's file grow
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=60)
    finally:  # a failed wait must not leave the download running, nor the hub holding
        hub.release.set()
        if first.poll() is None:
            first.kill()
            first.communicate()
    hub.hold_at_bytes = None
    assert first.returncode == 130 and "Run the same command to resume" in err, err
    kept = next(partial_dir.glob("model.safetensors.*")).stat().st_size

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    folder = download_dir(REPO)
    assert second.stdout.strip() == str(folder) and "MB/s" in second.stderr
    assert [(r.range_start, r.status) for r in hub.file_requests("model.safetensors")] == [(0, 200), (kept, 206)]
    assert verify(folder, deep=True)
    assert load_settings()[0].engine.model == str(folder), "--use made it Nalar's model"
