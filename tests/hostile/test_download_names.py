"""Hostile file names from a hub or mirror: a real HTTP hub on 127.0.0.1 (tests/support/hub_server.py),
reached through HF_ENDPOINT as a user points Nalar at a mirror, lists names that try to leave the model's
folder. Nothing may be written outside it, nothing at all may be written once one name is refused, and the
error names the file. The listed names end in a suffix the download wants (.txt, .json): others are never
written, so never checked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.models.hub_download import DownloadError, HubDownload, download_dir
from app.core.safe_files import UnsafeName, safe_child, safe_file_name
from tests.support.hub_server import HubRepo, LocalHub

REPO = "mirror/hostile"


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.fixture
def model_source(tmp_path: Path) -> Path:
    """A repository vLLM would accept (config.json and safetensors), and the bytes a hostile name carries."""
    folder = tmp_path / "source"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    (tmp_path / "payload").write_text("written by the mirror\n")
    return folder


def hostile_names(tmp_path: Path) -> list[str]:
    return [
        "../../escape-rel.txt",  # into the cache folder above the model's
        "sub/../../../escape-mid.txt",
        str(tmp_path / "escape-abs.txt"),  # absolute: /home/USER/.bashrc would be written the same way
        "a\x00b.json",  # NUL: a ValueError past every handler
        "C:\\x.json",  # a Windows drive and separator
        "sub\\..\\..\\escape-back.txt",  # backslash dots, read as a path on Windows
        "//server/share/escape-unc.txt",  # a UNC share
        "linked/escape-link.json",  # through a symlinked subfolder planted in the model's folder
    ]


@pytest.mark.parametrize("index", range(8), ids=lambda i: ["relative-dots", "mid-dots", "absolute", "nul",
                                                            "drive", "backslash-dots", "unc", "symlinked-folder"][i])
def test_a_hostile_listed_name_is_refused_and_nothing_is_written(tmp_path: Path, model_source: Path, index: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug caught: hub_download wrote each file to ``target / name`` with the name as the mirror listed it:
    ``../../escape-rel.txt`` landed in the cache folder above the model's, an absolute name anywhere the user
    can write, a name through a symlinked subfolder outside; a NUL raised a bare ValueError; and files listed
    before the bad one were written before it was seen."""
    name = hostile_names(tmp_path)[index]
    outside = tmp_path / "outside"
    outside.mkdir()
    target = download_dir(REPO)
    if name.startswith("linked/"):
        target.mkdir(parents=True)
        (target / "linked").symlink_to(outside, target_is_directory=True)
    repo = HubRepo.from_folder(REPO, model_source)
    repo.add_listed(name, tmp_path / "payload")
    before = files_under(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # replaced below: read per download, not at import
    with LocalHub([repo]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        with pytest.raises(DownloadError) as refused:
            HubDownload(REPO).run()
        assert hub.requests == [], "no file was fetched"
    assert repr(name) in str(refused.value) and "Nothing was written" in str(refused.value)
    assert files_under(tmp_path) == before, "nothing written anywhere, inside the model's folder or out"
    assert not (tmp_path / "escape-abs.txt").exists() and list(outside.iterdir()) == []


def test_nalar_download_exits_non_zero_naming_the_refused_file(tmp_path: Path, model_source: Path) -> None:
    """Bug caught: `nalar download` against a mirror listing ``../../escape-rel.txt`` wrote it into the cache
    folder and exited 0."""
    repo = HubRepo.from_folder(REPO, model_source)
    repo.add_listed("../../escape-rel.txt", tmp_path / "payload")
    with LocalHub([repo]) as hub:
        done = subprocess.run([sys.executable, "-m", "app", "download", REPO], capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, HF_ENDPOINT=hub.endpoint))
    assert done.returncode != 0
    assert "'../../escape-rel.txt'" in done.stderr and "was refused" in done.stderr, done.stderr
    assert not [p for p in tmp_path.rglob("escape-rel.txt")]


def test_the_same_names_nested_or_duplicated_as_folders_are_refused(tmp_path: Path) -> None:
    """Bug caught (the check itself): a name that is also another's folder (``a.json`` and ``a.json/b.json``)
    failed half-way with an uncaught FileExistsError; a listed ``.nalar-partial/…`` or marker name would
    overwrite Nalar's own download records."""
    from app.core.models.hub_download import placed_files

    for listing, bad in ((["a.json", "a.json/b.json"], "a.json"), ([".nalar-partial/x.json"], ".nalar-partial"),
                         (["nalar-download.json"], "nalar-download.json")):
        with pytest.raises(UnsafeName, match="refused") as refused:
            placed_files(tmp_path, listing)
        assert refused.value.name.startswith(bad)
    assert placed_files(tmp_path, ["config.json", "tok/vocab.txt"]) == {
        "config.json": tmp_path / "config.json", "tok/vocab.txt": tmp_path / "tok" / "vocab.txt"}


@pytest.mark.parametrize("name", ["", ".", "..", "a/../b", "a/./b", "a//b", "a/", "/etc/passwd", "\\\\srv\\x",
                                  "C:x", "c:\\x", "a\\b", "a\x00b", "a\nb", "a\x7fb", "a\ud800b", "x" * 256,
                                  "a/" * 2049 + "b"])
def test_safe_child_refuses_every_escape_and_names_the_file(tmp_path: Path, name: str) -> None:
    """Bug caught (the helper): any of these names joined onto a folder without a check."""
    with pytest.raises(UnsafeName) as refused:
        safe_child(tmp_path, name)
    assert refused.value.name == name and repr(name) in str(refused.value)


def test_safe_child_refuses_a_link_on_the_way_and_keeps_ordinary_names(tmp_path: Path) -> None:
    """Bug caught (the helper): a symlink as the last part, or deeper, followed out of the folder; an ordinary
    hub name (nested, unicode, spaces, dots inside) refused."""
    (tmp_path / "out").mkdir()
    root = tmp_path / "model"
    (root / "deep" / "er").mkdir(parents=True)
    (root / "deep" / "er" / "link").symlink_to(tmp_path / "out")
    (root / "file.json").symlink_to(tmp_path / "out" / "file.json")
    for name in ("deep/er/link/x.json", "file.json"):
        with pytest.raises(UnsafeName, match="symbolic link"):
            safe_child(root, name)
    for name in ("config.json", "deep/er/model-00001-of-00002.safetensors", "tokenizer/ünï côde..v2.json"):
        assert safe_child(root, name) == root.joinpath(*name.split("/"))


@pytest.mark.parametrize(("title", "expected"), [
    ("../../.bashrc", "bashrc"), ("/etc/passwd", "etc-passwd"), ("C:\\Windows\\x", "C-Windows-x"),
    ("a\x00b\nc", "a-b-c"), ("..", "conversation"), ("", "conversation"), ("Größe: 3 m?", "Größe- 3 m"),
])
def test_a_title_made_into_a_file_name_stays_one_plain_name(title: str, expected: str) -> None:
    """Bug caught: an imported conversation titled ``../../.bashrc`` suggested an export path outside the home
    folder; a title with a NUL made the save dialog's path invalid."""
    assert safe_file_name(title, "conversation") == expected
