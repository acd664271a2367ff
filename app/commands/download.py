"""`nalar download REPO`: the app's resumable hub download (app/core/models/hub_download.py), for a terminal."""

from __future__ import annotations

import sys

from app.commands.jobs import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from app.core.models.hub_download import (
    DownloadError,
    DownloadProgress,
    HubDownload,
    describe,
    format_bytes,
    partial_bytes,
)
from app.core.settings.settings import load_settings, save_settings


def run_download_command(repo_id: str, *, use: bool = False, revision: str = "main") -> int:
    """`nalar download REPO`: the same resumable download, for a terminal (or a machine without a display).

    Ctrl-C stops it; running the command again resumes. ``use`` makes the model Nalar's model.
    """
    def show(progress: DownloadProgress) -> None:
        print(f"\r{progress.fraction:6.1%}  {describe(progress)}   ", end="", file=sys.stderr, flush=True)

    download = HubDownload(repo_id, revision=revision, on_progress=show)
    print(f"nalar: downloading {repo_id} from {download.endpoint} into {download.target}", file=sys.stderr)
    try:
        folder = download.run()
    except DownloadError as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"\nnalar: stopped; {format_bytes(partial_bytes(repo_id))} kept. Run the same command to resume.",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    print(file=sys.stderr)
    if use:
        settings, _notice = load_settings()
        save_settings(settings.with_engine(model=str(folder)))
        print(f"nalar: {folder} is now the model (Settings → Model).", file=sys.stderr)
    print(folder)
    return EXIT_OK
