"""The Windows installer (PowerShell, sets Nalar up inside WSL2) checked statically: no Windows here.

The scripts are parsed with tree-sitter's PowerShell grammar (a syntax error fails the test), and what they
run is checked against this repository: the entry point, the make target, the install folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tree_sitter  # test extras: pyproject's [test]
import tree_sitter_powershell

ROOT = Path(__file__).resolve().parents[1]
WINDOWS = ROOT / "packaging" / "windows"
INSTALL = WINDOWS / "install.ps1"
UNINSTALL = WINDOWS / "uninstall.ps1"


def parse(path: Path) -> tree_sitter.Tree:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_powershell.language())).parse(path.read_bytes())


def errors(node, found=None) -> list[str]:
    found = [] if found is None else found
    if node.is_error or node.is_missing:
        found.append(f"line {node.start_point[0] + 1}: {node.text.decode(errors='replace')[:80]!r}")
    for child in node.children:
        errors(child, found)
    return found


@pytest.mark.parametrize("script", [INSTALL, UNINSTALL], ids=lambda p: p.name)
def test_the_scripts_parse_as_powershell(script: Path) -> None:
    tree = parse(script)
    assert not tree.root_node.has_error, errors(tree.root_node)


def test_install_checks_wsl2_ubuntu_wslg_and_the_gpu_before_installing() -> None:
    text = INSTALL.read_text().split("#>", 1)[1]  # the code, after the help comment
    order = [text.index(marker) for marker in (
        "wsl.exe --status", "wsl.exe -l -v", "/etc/os-release", "/mnt/wslg", "nvidia-smi -L", "apt-get install",
        "make setup")]
    assert order == sorted(order), "every check comes before anything is installed"
    assert "wsl --set-version $Distro 2" in text, "a WSL 1 distro is named with its fix"
    assert "Do not install an NVIDIA Linux driver inside WSL" in text
    assert 'if ($version -ne 2)' in text and '-ne "ubuntu"' in text
    assert "NALAR_ENGINE=gpu make setup" in text, "the GPU engine, whatever PATH make sees"
    assert ".venv/bin/python -m app doctor" in text


def test_the_shortcuts_start_the_apps_entry_point_through_wsl() -> None:
    text = INSTALL.read_text()
    launch = re.search(r'\$LaunchCommand = "(.+)"', text).group(1)
    install_dir = re.search(r'\$InstallDir = "(.+?)"', text).group(1)
    assert launch == "cd ~/$InstallDir && .venv/bin/python -m app" and install_dir == "nalar"
    # The same entry point as the Linux launcher and `make run`: app/__main__.py, in the checkout's venv.
    assert (ROOT / "app" / "__main__.py").is_file()
    assert "$(PY) -m app\n" in (ROOT / "Makefile").read_text()
    assert re.search(r"^setup:", (ROOT / "Makefile").read_text(), re.M)
    assert '''$link.Arguments = "-d $Distro -- bash -lc '$LaunchCommand'"''' in text
    assert 'Join-Path $env:WINDIR "System32\\wsl.exe"' in text
    assert '[Environment]::GetFolderPath("Programs")' in text and '[Environment]::GetFolderPath("Desktop")' in text
    assert '"..\\..\\resources\\nalar.ico"' in text and (ROOT / "resources" / "nalar.ico").read_bytes()[:4] == \
        b"\x00\x00\x01\x00", "an ICO file"
    # Copying skips the Linux venv and caches; the Makefile and the package are what must be there.
    assert "--exclude .venv" in text and 'app\\__main__.py' in text


def test_uninstall_removes_what_install_created() -> None:
    install, uninstall = INSTALL.read_text(), UNINSTALL.read_text()
    assert '"Nalar.lnk"' in install and '"Nalar.lnk"' in uninstall
    assert 'Join-Path $env:LOCALAPPDATA "Nalar"' in install and 'Join-Path $env:LOCALAPPDATA "Nalar"' in uninstall
    assert re.search(r'\$InstallDir = "(.+?)"', install).group(1) == re.search(r'\$InstallDir = "(.+?)"',
                                                                                 uninstall).group(1)
    assert "rm -rf ~/$InstallDir" in uninstall


def test_the_readme_walks_through_windows_with_nvidia_smi_in_wsl() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Windows", 1)[1].split("\n## ", 1)[0]
    for step in ("wsl --install -d Ubuntu", "nvidia-smi", "packaging\\windows\\install.ps1", "WSLg", "Start menu",
                 "uninstall.ps1"):
        assert step in section, step
    assert readme.count("## Windows") == 1
