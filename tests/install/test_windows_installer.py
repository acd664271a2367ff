"""The Windows installer's PowerShell and batch side, checked without Windows.

The scripts are parsed with tree-sitter's PowerShell grammar (a syntax error fails the test), the bash
bootstrap they hand to wsl.exe is run for real with the awkward paths a Windows user name brings, and what
they call is checked against this repository: each step exists in inside_wsl.sh and runs as the right user,
the checks come before anything is installed, the shortcut's target and command. The rules they read wsl.exe
with are tested in test_windows_wsl_rules.py, the steps inside WSL in test_windows_inside_wsl.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tree_sitter  # test extras: pyproject's [test]
import tree_sitter_powershell

ROOT = Path(__file__).resolve().parents[2]
WINDOWS = ROOT / "packaging" / "windows"
INSTALL, UNINSTALL, COMMON = WINDOWS / "install.ps1", WINDOWS / "uninstall.ps1", WINDOWS / "wsl_common.ps1"
INSIDE = WINDOWS / "inside_wsl.sh"
POWERSHELL = [INSTALL, UNINSTALL, COMMON]


def parse(path: Path) -> tree_sitter.Tree:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_powershell.language())).parse(path.read_bytes())


def errors(node, found=None) -> list[str]:
    found = [] if found is None else found
    if node.is_error or node.is_missing:
        found.append(f"line {node.start_point[0] + 1}: {node.text.decode(errors='replace')[:80]!r}")
    for child in node.children:
        errors(child, found)
    return found


def code(path: Path) -> str:
    """The script after its help comment."""
    text = path.read_text()
    return text.split("#>", 1)[1] if text.startswith("<#") else text


def bootstrap() -> str:
    found = re.search(r"^\$Bootstrap = '([^']*)'$", COMMON.read_text(), re.M)
    assert found, "wsl_common.ps1 defines $Bootstrap as one single-quoted line"
    return found.group(1)


@pytest.mark.parametrize("script", POWERSHELL, ids=lambda p: p.name)
def test_the_scripts_parse_as_powershell_and_are_ascii(script: Path) -> None:
    tree = parse(script)
    assert not tree.root_node.has_error, errors(tree.root_node)
    # Windows PowerShell 5.1 reads a script without a byte-order mark in the ANSI code page.
    assert script.read_bytes().isascii()


def test_install_checks_everything_before_installing_and_ends_with_a_window() -> None:
    text = code(INSTALL)
    order = [text.index(marker) for marker in (
        '@("--status")', "Get-WslDistroRows", '"-e", "true")', 'Invoke-Inside "check"',
        "Get-DistroDriveFreeBytes $Distro", 'Invoke-Inside "apt"', 'Invoke-Inside "copy"', 'Invoke-Inside "setup"',
        'Invoke-Inside "desktop-entry"', "CreateShortcut", 'Invoke-Inside "window-check"')]
    assert order == sorted(order), "every check (disk space too) comes before anything is installed; the window " \
                                   "check is last"
    assert "wsl --set-version $Distro 2" in text, "a WSL 1 distro is named with its fix"
    assert text.count("Stop-WithWslDiagnosis") == 2, "wsl --status and the start read wsl.exe's messages"
    assert 'if ($listing.Code -ne 0) { Stop-WithWslDiagnosis "wsl -l -v" $listing }' in COMMON.read_text()


def test_install_passes_the_engine_the_check_chose_and_the_disk_it_needs() -> None:
    """Issue 25's bugs 3 and 6: setup was always the GPU engine, and free space on the Windows drive that holds
    the distro's growing virtual disk was never checked (df inside WSL shows the disk's 1 TB maximum)."""
    text = code(INSTALL)
    assert '$Engine = (Get-Said "engine") | Select-Object -First 1' in text
    assert '$NeedGb = [int]((Get-Said "need-gb") | Select-Object -First 1)' in text
    assert 'Invoke-Inside "setup" @($Engine)' in text and 'Invoke-Inside "setup"\n' not in text
    assert "if ($freeGb -lt $NeedGb) {" in text
    said = set(re.findall(r'echo "nalar-([\w-]+)=', INSIDE.read_text()))
    assert {"engine", "need-gb", "home"} <= said, "what install.ps1 reads, check says"
    assert '"HKCU:\\Software\\Microsoft\\Windows\\CurrentVersion\\Lxss"' in COMMON.read_text()
    assert text.index(". (Join-Path $PSScriptRoot \"wsl_common.ps1\")") < text.index("wsl.exe")


def test_the_source_path_reaches_wsl_through_wslenv_not_wslpath() -> None:
    install, common = code(INSTALL), COMMON.read_text()
    assert "wslpath" not in install and "wslpath" not in common.split("function Fail")[1]
    assert 'Set-WslPathVariable "NALAR_SOURCE" $Source' in install
    assert '$entries = @("$Name/p")' in common and "$env:WSLENV = $entries -join \":\"" in common
    assert 'Set-WslPathVariable "NALAR_SCRIPTS" $PSScriptRoot' in common
    # UTF-8 decoding and WSL_UTF8 are set before the first wsl.exe call.
    first_call = common.index("& wsl.exe")
    assert common.index("[Console]::OutputEncoding = $Utf8") < first_call
    assert common.index('$env:WSL_UTF8 = "1"') < first_call


def steps_called(text: str) -> list[tuple[str, bool]]:
    return [(m.group(1), "-AsRoot" in m.group(0)) for m in re.finditer(r'Invoke-Inside "([\w-]+)"[^\n]*', text)]


def test_every_step_exists_inside_wsl_and_runs_as_the_right_user() -> None:
    labels = set(re.findall(r"^    ([\w-]+)\) ", INSIDE.read_text(), re.M))
    called = steps_called(code(INSTALL)) + steps_called(code(UNINSTALL))
    assert {step for step, _ in called} <= labels
    # System folders need root; everything that lands in the user's home must not run as root.
    as_root = {step for step, root in called if root}
    assert as_root == {"apt", "desktop-entry", "remove-desktop-entry"}
    assert {"check", "copy", "clone", "setup", "window-check", "remove-files", "caches"} <= \
        {step for step, root in called if not root}


@pytest.mark.parametrize("folder", ["plain", "Jürgen O'Brien", "a b (x86) $HOME;*"])
def test_the_bootstrap_runs_the_script_from_any_windows_user_folder(tmp_path: Path, folder: str) -> None:
    scripts = tmp_path / "mnt" / "c" / "Users" / folder / "nalar" / "packaging" / "windows"
    scripts.mkdir(parents=True)
    shutil.copy(INSIDE, scripts)
    home = tmp_path / "home"
    (home / ".cache" / "vllm").mkdir(parents=True)
    result = subprocess.run(["bash", "-c", bootstrap(), "inside-wsl", "caches"], capture_output=True, text=True,
                            env={"NALAR_SCRIPTS": str(scripts), "HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"nalar-cache={home}/.cache/vllm ")


@pytest.mark.parametrize("translated", ["", "C:\\Users\\me\\nalar\\packaging\\windows", "/mnt/z/missing"])
def test_the_bootstrap_exits_86_when_wsl_could_not_translate_the_folder(translated: str) -> None:
    result = subprocess.run(["bash", "-c", bootstrap(), "inside-wsl", "check"], capture_output=True,
                            env={"NALAR_SCRIPTS": translated, "PATH": "/usr/bin:/bin"})
    assert result.returncode == 86


def test_the_shortcut_runs_wslg_with_exec_and_falls_back_to_wsl() -> None:
    text = code(INSTALL)
    launch = re.search(r'\$LaunchCommand = "(.+)"', text).group(1)
    assert launch == "exec bash ~/$InstallDir/packaging/windows/inside_wsl.sh launch"
    assert re.search(r'\$InstallDir = "(.+?)"', text).group(1) == "nalar"
    assert '$link.Arguments = "-d $Distro --cd ~ -- $LaunchCommand"' in text
    assert 'Join-Path $env:ProgramFiles "WSL\\wslg.exe"' in text and "Get-Command wslg.exe" in text
    fallback = text[text.index("if ($wslg) {"):]
    assert '$link.TargetPath = Join-Path $env:WINDIR "System32\\wsl.exe"' in fallback
    assert '[Environment]::GetFolderPath("Programs")' in text and '[Environment]::GetFolderPath("Desktop")' in text
    assert '"..\\..\\resources\\nalar.ico"' in text and (ROOT / "resources" / "nalar.ico").read_bytes()[:4] == \
        b"\x00\x00\x01\x00", "an ICO file"
    assert "~/.local/state/nalar/wslg-launch.log" in text and "wslg-launch.log" in INSIDE.read_text()
    assert '"rsync"' in text, "the copy step's rsync is among the packages installed before it"


@pytest.mark.parametrize("name", ["install", "uninstall"])
def test_the_cmd_files_bypass_the_execution_policy_and_keep_the_window(name: str) -> None:
    text = (WINDOWS / f"{name}.cmd").read_text()
    assert f'powershell.exe -NoProfile -ExecutionPolicy Bypass -File "%~dp0{name}.ps1" %*' in text
    assert text.index("ERRORLEVEL") < text.index("pause") < text.index("exit /b %NALAR_EXIT%")
    assert "chcp 65001" in text and text.isascii()


def test_uninstall_reads_the_distro_from_the_shortcut_and_removes_the_shortcuts_last() -> None:
    """Issue 25's bug 2: uninstall looked only for a distro called "Ubuntu" and deleted the shortcuts (the only
    record of the distro used) before it failed, leaving the desktop entry, ~/nalar and the Start-menu item."""
    text = code(UNINSTALL)
    assert '[string]$Distro = ""' in text and '[string]$Distro = "Ubuntu"' not in text
    record = text.index('.Arguments -match "^-d (\\S+) "')
    choice = text.index("Select-UbuntuDistro (Get-WslDistroRows) ${function:Get-UbuntuRelease}")
    inside = [text.index(f'Invoke-Inside "{step}"') for step in ("remove-desktop-entry", "remove-files", "caches")]
    removal = text.index("Remove-Item -Recurse -Force -LiteralPath $path")
    assert record < choice < min(inside) and max(inside) < removal
    # The record's shape is the one install.ps1 writes.
    assert re.match(r"^-d (\S+) ", "-d Ubuntu-24.04 --cd ~ -- exec bash ~/nalar/packaging/windows/inside_wsl.sh launch")
    assert '$link.Arguments = "-d $Distro --cd ~ -- $LaunchCommand"' in code(INSTALL)


def test_uninstall_removes_what_install_created_and_checks_it() -> None:
    install, uninstall = code(INSTALL), code(UNINSTALL)
    assert '"Nalar.lnk"' in install and '"Nalar.lnk"' in uninstall
    assert 'Join-Path $env:LOCALAPPDATA "Nalar"' in install and 'Join-Path $env:LOCALAPPDATA "Nalar"' in uninstall
    assert "if (Test-Path -LiteralPath $path) { $left += $path }" in uninstall, "each removal is checked"
    assert 'Invoke-Inside "remove-desktop-entry" -AsRoot' in uninstall
    # The caches are offered, with their sizes, and a switch each way for unattended runs.
    assert 'Read-Host "Remove them? [y/N]"' in uninstall and "$RemoveCaches" in uninstall and "$KeepCaches" in uninstall


def test_the_windows_guide_walks_through_the_new_installer() -> None:
    """The Windows steps live in docs/guide/windows.md, and the README links there."""
    section = (ROOT / "docs" / "guide" / "windows.md").read_text()
    for step in ("wsl --install -d Ubuntu", "create your user", "virtualisation", "nvidia-smi",
                 "packaging\\windows\\install.cmd", "WSLg", "Start menu", "wslg-launch.log", "uninstall.cmd",
                 "compute capability 7.0", "CPU engine", "AMD", "NALAR_ENGINE=cpu", "slow"):
        assert step in section, step
    assert "](docs/guide/windows.md)" in (ROOT / "README.md").read_text()
