"""How the Windows installer reads wsl.exe, tested on what wsl.exe really prints, without PowerShell.

wsl_rules.json holds the rules wsl_common.ps1 applies: the `wsl -l -v` row and the message -> diagnosis
table. The few lines of PowerShell around them (strip NUL bytes and a byte-order mark, first rule that fits,
case-insensitive) are mirrored here line for line. The samples are wsl.exe's own messages, in the
encodings it writes them: UTF-8 with WSL_UTF8 set, UTF-16LE from the built-in WSL, which ignores it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

WINDOWS = Path(__file__).resolve().parents[2] / "packaging" / "windows"
RULES = json.loads((WINDOWS / "wsl_rules.json").read_text())
COMMON = (WINDOWS / "wsl_common.ps1").read_text()

VIRTUALISATION_STORE = (
    "WSL2 is not supported with your current machine configuration.\r\n"
    'Please enable the "Virtual Machine Platform" optional component and ensure virtualization is enabled in '
    "the BIOS.\r\nEnable \"Virtual Machine Platform\" by running: wsl.exe --install --no-distribution\r\n"
    "For information please visit https://aka.ms/enablevirtualization\r\n"
    "Error code: Wsl/Service/CreateInstance/CreateVm/HCS/HCS_E_HYPERV_NOT_INSTALLED\r\n")
VIRTUALISATION_INBOX = (
    "Please enable the Virtual Machine Platform Windows feature and ensure virtualization is enabled in the "
    "BIOS.\r\nFor information please visit https://aka.ms/enablevirtualization\r\n"
    "Error: 0x80370102\r\n")
WSL_OFF = ("The Windows Subsystem for Linux optional component is not enabled. Please enable it and try again.\r\n"
           "Error code: Wsl/WSL_E_WSL_OPTIONAL_COMPONENT_REQUIRED\r\n")
NO_DISTROS = ("Windows Subsystem for Linux has no installed distributions.\r\n"
              "Distributions can be installed by visiting the Microsoft Store:\r\nhttps://aka.ms/wslstore\r\n")
NO_SUCH_DISTRO = ("There is no distribution with the supplied name.\r\n"
                  "Error code: Wsl/Service/WSL_E_DISTRO_NOT_FOUND\r\n")
OLD_KERNEL = ("WSL 2 requires an update to its kernel component. For information please visit "
              "https://aka.ms/wsl2kernel\r\n")
OLD_WSL = "Invalid command line option: --status\r\nUsage: wsl.exe [Argument] [Options...] [CommandLine]\r\n"
TIMEOUT = ("The operation timed out because a response was not received from the virtual machine or container.\r\n"
           "Error code: Wsl/Service/CreateInstance/CreateVm/HCS_E_CONNECTION_TIMEOUT\r\n")
LISTING = ("  NAME              STATE           VERSION\r\n* Ubuntu            Running         2\r\n"
           "  docker-desktop    Stopped         2\r\n  Ubuntu-20.04      Stopped         1\r\n")


def as_powershell_reads(text: str, utf16: bool, bom: bool = False) -> list[str]:
    """wsl.exe's bytes as PowerShell's lines, with [Console]::OutputEncoding = UTF-8 (StreamReader.ReadLine)."""
    raw = ("\ufeff" if bom else "").encode("utf-16-le" if utf16 else "utf-8") + \
        text.encode("utf-16-le" if utf16 else "utf-8")
    return re.split(r"\r\n|\r|\n", raw.decode("utf-8", errors="replace").rstrip("\n"))


def convert_from_wsl_text(lines: list[str]) -> list[str]:
    """ConvertFrom-WslText: ($line -replace "`0", "") -replace "^\\uFEFF", "" ."""
    return [re.sub("^\ufeff", "", line.replace("\0", "")) for line in lines]


def diagnose(code: int, text: str) -> dict | None:
    """Get-WslDiagnosis: the first rule whose exit_code equals, or whose pattern matches (-match ignores case)."""
    for rule in RULES["diagnoses"]:
        if "exit_code" in rule and rule["exit_code"] == code:
            return rule
        if "pattern" in rule and re.search(rule["pattern"], text, re.IGNORECASE):
            return rule
    return None


def distro_rows(lines: list[str]) -> list[tuple[str, str, int]]:
    rows = []
    for line in lines:
        found = re.search(RULES["distro_row"], line, re.IGNORECASE)
        if found and found.group(1) != "NAME":
            rows.append((found.group(1), found.group(2), int(found.group(3))))
    return rows


def test_the_powershell_applies_the_rules_the_way_mirrored_here() -> None:
    assert """foreach ($line in $Lines) { ($line -replace "`0", "") -replace "^\\uFEFF", "" }""" in COMMON
    assert '(($names -contains "exit_code") -and $rule.exit_code -eq $Code) { return $rule }' in COMMON
    assert '(($names -contains "pattern") -and $Text -match $rule.pattern) { return $rule }' in COMMON
    assert "foreach ($rule in $WslRules.diagnoses)" in COMMON


@pytest.mark.parametrize(("utf16", "bom"), [(False, False), (True, False), (True, True)],
                         ids=["store-wsl-utf8", "inbox-wsl-utf16", "utf16-with-bom"])
def test_the_distro_listing_parses_in_either_encoding(utf16: bool, bom: bool) -> None:
    lines = as_powershell_reads(LISTING, utf16, bom)
    assert distro_rows(convert_from_wsl_text(lines)) == [
        ("Ubuntu", "Running", 2), ("docker-desktop", "Stopped", 2), ("Ubuntu-20.04", "Stopped", 1)]
    if utf16:  # the bug the stripping fixes: with the NULs left in, no distro is found
        assert distro_rows(lines) == []


@pytest.mark.parametrize(("message", "expected"), [
    (VIRTUALISATION_STORE, "virtualisation is turned off in the PC's BIOS/UEFI"),
    (VIRTUALISATION_INBOX, "virtualisation is turned off in the PC's BIOS/UEFI"),
    (WSL_OFF, "Subsystem for Linux is not turned on"),
    (NO_DISTROS, "WSL has no Linux distro installed"),
    (NO_SUCH_DISTRO, "no distro by the name"),
    (OLD_KERNEL, "WSL 2 needs an update"),
    (OLD_WSL, "old WSL built into Windows"),
    (TIMEOUT, "did not answer in time"),
])
@pytest.mark.parametrize("utf16", [False, True], ids=["utf8", "utf16"])
def test_wsl_messages_get_their_diagnosis_in_either_encoding(message: str, expected: str, utf16: bool) -> None:
    text = "\n".join(convert_from_wsl_text(as_powershell_reads(message, utf16)))
    rule = diagnose(-1, text)  # wsl.exe exits with -1 on these
    assert rule is not None and expected in rule["problem"], text


def test_virtualisation_is_named_not_the_distro_and_not_wsl_install() -> None:
    rule = diagnose(-1, "\n".join(convert_from_wsl_text(as_powershell_reads(VIRTUALISATION_INBOX, True))))
    assert "BIOS" in rule["fix"] and "--install --no-distribution" in rule["fix"]
    raw = "\n".join(as_powershell_reads(VIRTUALISATION_INBOX, True))
    assert diagnose(-1, raw) is None, "unstripped UTF-16 matches nothing: the NUL stripping is what finds it"


def test_our_own_exit_code_and_the_unknown_case() -> None:
    assert "not visible inside WSL" in diagnose(86, "")["problem"]
    assert diagnose(-1, "Catastrophic failure\nError code: Wsl/Service/E_UNEXPECTED") is None


def test_every_rule_is_exercised_and_speaks_plainly() -> None:
    samples = [VIRTUALISATION_STORE, WSL_OFF, NO_DISTROS, NO_SUCH_DISTRO, OLD_KERNEL, OLD_WSL, TIMEOUT]
    used = {id(diagnose(-1, sample)) for sample in samples} | {id(diagnose(86, ""))}
    assert used == {id(rule) for rule in RULES["diagnoses"]}
    for rule in RULES["diagnoses"]:
        assert rule["problem"] and rule["fix"] and (rule["problem"] + rule["fix"]).isascii()
    assert (WINDOWS / "wsl_rules.json").read_bytes().isascii()


def test_linux_output_is_read_as_utf8_so_user_names_survive() -> None:
    """The rule [Console]::OutputEncoding = UTF-8 exists for: Linux writes UTF-8; the console's OEM code page
    (437 on English Windows) would turn a home or path with an umlaut into mojibake."""
    line = "Copied /mnt/c/Users/Jürgen O'Brien/nalar to /home/jürgen/nalar\n".encode()
    assert line.decode("utf-8") == "Copied /mnt/c/Users/Jürgen O'Brien/nalar to /home/jürgen/nalar\n"
    assert "Jürgen" not in line.decode("cp437")
    said = re.compile(re.search(r'if \(\$line -match "(.+?)"\)', COMMON).group(1))
    assert said.match("nalar-home=/home/jürgen").groups() == ("home", "/home/jürgen")
    assert said.match("nalar-problem: Ubuntu has no user").groups() == ("problem", "Ubuntu has no user")
    assert said.match("nalar-cache=/home/j/.cache/pip 1.2G").groups() == ("cache", "/home/j/.cache/pip 1.2G")
    assert said.match("GPU: NVIDIA GeForce RTX 3060 (compute capability 8.6)") is None
