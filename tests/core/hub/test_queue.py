"""The download queue against the fake hub over real HTTP: two at a time, cancel, a restart that resumes with
a Range request, the LFS sha256 checked, a full disk and a gated repo refused with the fix named."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.core.hub.queue import DownloadQueue, QueueItem
from app.core.hub.search import HubOffline
from app.core.models.hub_download import DownloadError, download_dir, is_complete
from tests.core.hub.conftest import DOWNLOAD_BYTES
from tests.support.hub_server import LocalHub


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    event = threading.Event()
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        event.wait(0.01)


def item(queue: DownloadQueue, item_id: str) -> QueueItem:
    return next(i for i in queue.items() if i.item_id == item_id)


def in_weights(queue: DownloadQueue, item_id: str) -> bool:
    now = item(queue, item_id)
    return now.current_file == "model.safetensors" and now.file_done_bytes > 0


def test_two_downloads_one_cancelled_one_resumed_after_a_restart(hub: LocalHub, tmp_path: Path) -> None:
    """Catches a queue that runs one at a time or more than asked, a cancel that leaves its partial bytes (or
    deletes the other download's), a state file that loses a running item, and a restart that downloads a
    file again from byte 0 instead of resuming it with a Range request."""
    hub.throttle_bytes_per_s = 2 * DOWNLOAD_BYTES  # about half a second a file: the cancel lands mid-file
    state = tmp_path / "queue.json"
    seen: list[QueueItem] = []
    queue = DownloadQueue(state, parallel=2, endpoint=hub.endpoint, on_change=seen.append)
    a = queue.add("acme/small-a")
    b = queue.add("acme/small-b")
    assert a.total_bytes == b.total_bytes > DOWNLOAD_BYTES - 4160
    wait_for(lambda: in_weights(queue, a.item_id) and in_weights(queue, b.item_id), "both transferring weights")
    assert {i.state for i in queue.items()} == {"running"}
    queue.cancel(a.item_id)
    wait_for(lambda: item(queue, a.item_id).state == "cancelled", "the cancel")
    assert not download_dir("acme/small-a").exists()
    assert item(queue, b.item_id).state == "running"
    queue.close()  # Nalar quits with b mid-file
    left = item(queue, b.item_id)
    assert 0 < left.done_bytes < left.total_bytes and not is_complete(download_dir("acme/small-b"))
    hub.throttle_bytes_per_s = None

    restarted = DownloadQueue(state, parallel=2, endpoint=hub.endpoint)
    wait_for(lambda: item(restarted, b.item_id).state == "done", "the resumed download")
    assert item(restarted, a.item_id).state == "cancelled"
    assert is_complete(download_dir("acme/small-b"))
    weights = hub.file_requests("model.safetensors")
    resumed = [r for r in weights if r.range_start > 0]
    assert resumed and resumed[-1].status == 206
    source = hub.repos["acme/small-b"].files["model.safetensors"].read_bytes()
    assert (download_dir("acme/small-b") / "model.safetensors").read_bytes() == source
    assert any(s.current_file == "model.safetensors" and s.file_total_bytes == len(source) for s in seen)
    restarted.close()


def test_sha_mismatch_is_refused_and_the_file_deleted(hub: LocalHub, tmp_path: Path) -> None:
    """Catches a download that keeps bytes whose sha256 differs from the hub's LFS hash (a corrupted transfer
    or a mirror serving other bytes): the file is deleted and the failure names it."""
    hub.repos["acme/small-a"].listed_sha256["model.safetensors"] = "0" * 64
    queue = DownloadQueue(tmp_path / "q.json", endpoint=hub.endpoint)
    a = queue.add("acme/small-a")
    wait_for(lambda: item(queue, a.item_id).state == "failed", "the refusal")
    assert "model.safetensors" in item(queue, a.item_id).error and "sha256" in item(queue, a.item_id).error
    folder = download_dir("acme/small-a")
    assert not (folder / "model.safetensors").exists() and not is_complete(folder)
    assert not any(p.name.startswith("model.safetensors") for p in folder.rglob("*"))
    queue.close()


def test_full_disk_is_refused_before_anything_is_written(hub: LocalHub, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a queue that starts a download the disk can't hold (shutil.disk_usage is patched to 1 GB free):
    the message gives what is needed and what is free."""
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=10**9))
    queue = DownloadQueue(tmp_path / "q.json", endpoint=hub.endpoint)
    with pytest.raises(DownloadError, match=r"needs 3\.1 MB more .* has 1\.0 GB free"):
        queue.add("acme/small-a")
    assert queue.items() == [] and not download_dir("acme/small-a").exists()
    queue.close()


def test_gated_repo_fails_naming_hf_auth_login(hub: LocalHub, tmp_path: Path) -> None:
    """Catches a gated repo's 401 reported as a network error: the item says to log in with `hf auth login`."""
    queue = DownloadQueue(tmp_path / "q.json", endpoint=hub.endpoint)
    gated = queue.add("acme/gated-model")
    wait_for(lambda: item(queue, gated.item_id).state == "failed", "the refusal")
    assert "hf auth login" in item(queue, gated.item_id).error
    queue.close()


def test_offline_hub_is_refused_at_once(closed_port: str, tmp_path: Path) -> None:
    """Catches an add that waits on huggingface_hub's retries when the hub can't be reached."""
    queue = DownloadQueue(tmp_path / "q.json", endpoint=closed_port)
    started = time.monotonic()
    with pytest.raises(HubOffline, match=closed_port):
        queue.add("acme/small-a")
    assert time.monotonic() - started < 2.0
    queue.close()


def test_one_at_a_time_when_asked_and_pause_resume(hub: LocalHub, tmp_path: Path) -> None:
    """Catches a queue that ignores parallel=1, or a pause that loses the partial bytes (resume must go on)."""
    hub.throttle_bytes_per_s = 4 * DOWNLOAD_BYTES
    queue = DownloadQueue(tmp_path / "q.json", parallel=1, endpoint=hub.endpoint)
    a, b = queue.add("acme/small-a"), queue.add("acme/small-b")
    wait_for(lambda: in_weights(queue, a.item_id), "a transferring")
    assert item(queue, b.item_id).state == "queued"
    queue.pause(a.item_id)
    wait_for(lambda: item(queue, a.item_id).state == "paused", "the pause")
    wait_for(lambda: item(queue, b.item_id).state in ("running", "done"), "b starting in a's place")
    hub.throttle_bytes_per_s = None
    queue.resume(a.item_id)
    wait_for(lambda: {i.state for i in queue.items()} == {"done"}, "both done")
    assert any(r.range_start > 0 for r in hub.file_requests("model.safetensors"))
    queue.forget(a.item_id)
    assert [i.item_id for i in queue.items()] == [b.item_id]
    queue.close()
