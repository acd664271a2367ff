"""The installer's automatic distro choice (Select-UbuntuDistro in wsl_common.ps1), without Windows.

The rule's data (which names are Ubuntu, the lowest release) lives in wsl_rules.json, read by the PowerShell
and by this test; the few lines that apply it are mirrored here line for line, and the test checks those
lines are in the script. The listings are what `wsl -l -v` prints, decoded as install.ps1 decodes them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.install.test_windows_wsl_rules import as_powershell_reads, convert_from_wsl_text

WINDOWS = Path(__file__).resolve().parents[2] / "packaging" / "windows"
RULES = json.loads((WINDOWS / "wsl_rules.json").read_text())
COMMON = (WINDOWS / "wsl_common.ps1").read_text()
INSTALL = (WINDOWS / "install.ps1").read_text()
INSIDE = (WINDOWS / "inside_wsl.sh").read_text()


def rows_of(listing: str) -> list[dict]:
    """Get-WslDistroRows: the row regex, and the starred row is the default."""
    rows = []
    for line in convert_from_wsl_text(as_powershell_reads(listing, utf16=True)):
        is_default = re.match(r"^\s*\*", line) is not None
        found = re.search(RULES["distro_row"], line, re.IGNORECASE)
        if found and found.group(1) != "NAME":
            rows.append({"Name": found.group(1), "Version": int(found.group(3)), "Default": is_default})
    return rows


def release(text: str) -> tuple[int, ...]:
    """PowerShell's [version] "24.04": compared part by part as numbers."""
    return tuple(int(part) for part in text.split("."))


def select_ubuntu_distro(rows: list[dict], release_of: Callable[[str], str | None]) -> str | None:
    """Select-UbuntuDistro."""
    usable = []
    for row in rows:
        found = re.search(RULES["ubuntu_name"], row["Name"], re.IGNORECASE)
        if row["Version"] != 2 or not found:
            continue
        said = found.group(1) or release_of(row["Name"])
        if said and release(said) >= release(RULES["min_ubuntu"]):
            usable.append((row, release(said)))
    default = [row for row, _ in usable if row["Default"]]
    if default:
        return default[0]["Name"]
    newest = sorted(usable, key=lambda pair: pair[1], reverse=True)
    return newest[0][0]["Name"] if newest else None


def listing(*rows: tuple[str, int, bool]) -> str:
    lines = ["  NAME              STATE           VERSION"]
    lines += [f"{'*' if default else ' '} {name:<17} Stopped         {version}" for name, version, default in rows]
    return "\r\n".join(lines) + "\r\n"


def test_the_powershell_applies_the_rule_the_way_mirrored_here() -> None:
    for line in (
        '$isDefault = $line -match "^\\s*\\*"',
        "if ($row.Version -ne 2 -or -not ($row.Name -match $WslRules.ubuntu_name)) { continue }",
        "$release = if ($Matches[1]) { $Matches[1] } else { & $ReleaseOf $row.Name }",
        "if ($release -and ([version]$release -ge [version]$WslRules.min_ubuntu)) {",
        "$default = @($usable | Where-Object { $_.Row.Default })",
        "$newest = @($usable | Sort-Object -Property Release -Descending)",
        '". /etc/os-release && echo `$VERSION_ID"',
    ):
        assert line in COMMON, line
    assert "$row = Select-UbuntuDistro $rows ${function:Get-UbuntuRelease}" in INSTALL
    assert '-like "Ubuntu*"' not in INSTALL, "the old rule: the first Ubuntu* row, whatever it was"
    assert f"MIN_UBUNTU={RULES['min_ubuntu']}" in INSIDE, "the choice and the check inside agree on the release"


OS_RELEASE = {"Ubuntu": "24.04"}


@pytest.mark.parametrize(("rows", "releases", "chosen"), [
    # Issue 25's bug 5: the default row is WSL 1, a usable Ubuntu-24.04 sits below it.
    ([("Ubuntu", 1, True), ("Ubuntu-24.04", 2, False)], {}, "Ubuntu-24.04"),
    # ... or the default is 20.04 (too old for Python 3.10).
    ([("Ubuntu-20.04", 2, True), ("docker-desktop", 2, False), ("Ubuntu-24.04", 2, False)], {}, "Ubuntu-24.04"),
    ([("Ubuntu", 2, True), ("Ubuntu-24.04", 2, False)], {"Ubuntu": "20.04"}, "Ubuntu-24.04"),
    # A usable default is kept, even with a newer one beside it (it is the one the user works in).
    ([("Ubuntu", 2, True), ("Ubuntu-24.04", 2, False)], {"Ubuntu": "22.04"}, "Ubuntu"),
    # Otherwise the newest: by version, not text (22.10 is newer than 22.04, older than 24.04).
    ([("docker-desktop", 2, True), ("Ubuntu-22.04", 2, False), ("Ubuntu-24.04", 2, False),
      ("Ubuntu-22.10", 2, False)], {}, "Ubuntu-24.04"),
    ([("docker-desktop", 2, True), ("Ubuntu-22.10", 2, False), ("Ubuntu-22.04", 2, False)], {}, "Ubuntu-22.10"),
    # Nothing usable: None (install.ps1 then names what it found and how to get Ubuntu-24.04).
    ([("Ubuntu", 1, True), ("Ubuntu-20.04", 2, False), ("Debian", 2, False)], {}, None),
    ([("Ubuntu", 2, True)], {}, None),  # its os-release can't be read
])
def test_the_automatic_choice_prefers_a_usable_wsl2_ubuntu(rows: list, releases: dict, chosen: str | None) -> None:
    asked: list[str] = []

    def release_of(name: str) -> str | None:
        asked.append(name)
        return releases.get(name)

    assert select_ubuntu_distro(rows_of(listing(*rows)), release_of) == chosen
    assert all(name == "Ubuntu" for name in asked), "only a name without its release is asked"


def test_the_listing_marks_the_default_row() -> None:
    rows = rows_of(listing(("Ubuntu", 1, True), ("Ubuntu-24.04", 2, False)))
    assert rows == [{"Name": "Ubuntu", "Version": 1, "Default": True},
                    {"Name": "Ubuntu-24.04", "Version": 2, "Default": False}]
