"""The figures the README and docs/ quote come from docs/results/*.json through packaging/figures.py: a quoted
test count, suite time or benchmark result that differs from its results file fails here, and none is typed by
hand outside a generated block."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "packaging" / "figures.py"


def figures() -> ModuleType:
    """The script as a module (packaging/ is not a package, and PyPI's `packaging` owns that name)."""
    spec = importlib.util.spec_from_file_location("nalar_figures", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--root", str(root)], capture_output=True,
                          text=True, timeout=60)


def copy_docs(tmp_path: Path) -> Path:
    (tmp_path / "README.md").write_text((ROOT / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("*.png"))
    return tmp_path


def test_every_quoted_figure_matches_its_results_file() -> None:
    """Bug caught: a benchmark rerun or a suite run updates docs/results/ but the prose still quotes the old
    figure (the README said 705 tests in 2½ minutes long after the suite had grown past 1,100)."""
    result = check(ROOT)
    assert result.returncode == 0, f"run `python packaging/figures.py`:\n{result.stderr}"


def test_the_check_bites_on_a_changed_results_file_and_a_hand_edited_block(tmp_path: Path) -> None:
    """The checker itself, on a copy: a results file that moves on, and a figure edited inside a block, each
    fail the check, naming the file and block; regenerating mends both."""
    root = copy_docs(tmp_path)
    assert check(root).returncode == 0
    suite_file = root / "docs" / "results" / "suite.json"
    suite = json.loads(suite_file.read_text(encoding="utf-8"))
    suite["fast"]["passed"] += 1
    suite_file.write_text(json.dumps(suite), encoding="utf-8")
    result = check(root)
    assert result.returncode == 1
    assert re.search(r"README\.md:\d+: figures:suite differs", result.stderr), result.stderr
    assert "docs/dev/tests.md" in result.stderr and "figures:suite-table" in result.stderr, result.stderr

    subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)], check=True, capture_output=True, timeout=60)
    assert check(root).returncode == 0
    compare = root / "docs" / "guide" / "thinking.md"
    text = compare.read_text(encoding="utf-8")
    block = re.search(r"<!-- figures:compare-summary -->\n.*?<!-- /figures:compare-summary -->", text, re.S)
    assert block and "9.3 s" in block.group(0)
    compare.write_text(text.replace(block.group(0), block.group(0).replace("9.3 s", "8.1 s")), encoding="utf-8")
    result = check(root)
    assert result.returncode == 1 and "thinking.md" in result.stderr and "compare-summary" in result.stderr


def test_an_unknown_block_or_a_lone_marker_is_named(tmp_path: Path) -> None:
    root = copy_docs(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\n<!-- figures:no-such -->\n<!-- /figures:no-such -->\n"
                      "<!-- figures:suite -->\n", encoding="utf-8")
    result = check(root)
    assert result.returncode == 1
    assert "figures:no-such: no render function" in result.stderr
    assert "figures:suite: a marker without its pair" in result.stderr


# Test counts and suite times, wherever they would be typed by hand: "1,144 tests", "56 passed", "4 min 49 s",
# "takes about 15 minutes of tests".
HAND_TYPED = re.compile(r"\b\d[\d,]*\s+(?:fast |real-engine )?(?:tests|passed|failed|xfailed)\b"
                        r"|\b\d+\s*min(?:utes)?\s+\d+\s*s\b|\bminutes of tests\b", re.I)


def test_test_counts_and_suite_times_appear_only_inside_generated_blocks() -> None:
    """Bug caught: the README's Tests section typed the suite's counts and minutes by hand, and they went stale."""
    module = figures()
    found = []
    for path in module.markdown_files(ROOT):
        outside = module.BLOCK.sub("", path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(ROOT)}: {m.group(0)!r}" for m in HAND_TYPED.finditer(outside)]
    assert found == []


def junit(path: Path, suites: list[tuple[int, int, int, int, float, int]]) -> Path:
    """A pytest-style junit file: per suite (tests, failures, errors, skipped, time, xfailed among the skipped)."""
    body = []
    for tests, failures, errors, skipped, seconds, xfailed in suites:
        cases = [f'<testcase classname="t" name="x{n}"><skipped type="pytest.xfail" message="known"/></testcase>'
                 for n in range(xfailed)]
        cases += [f'<testcase classname="t" name="s{n}"><skipped type="pytest.skip" message="no tool"/></testcase>'
                  for n in range(skipped - xfailed)]
        body.append(f'<testsuite name="pytest" errors="{errors}" failures="{failures}" skipped="{skipped}" '
                    f'tests="{tests}" time="{seconds}">{"".join(cases)}</testsuite>')
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?><testsuites>{"".join(body)}</testsuites>',
                    encoding="utf-8")
    return path


def test_suite_json_is_written_from_the_two_junit_files(tmp_path: Path) -> None:
    """`make test` calls this after its two pytest runs; the real-engine run here collected nothing (exit 5)."""
    fast = junit(tmp_path / "fast.xml", [(12, 1, 1, 3, 61.25, 2)])
    real = junit(tmp_path / "real.xml", [(0, 0, 0, 0, 0.5, 0)])
    out = tmp_path / "suite.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--suite-from-junit", str(fast), str(real), "--setup-s", "180",
                           "--total-s", "245.4", "--fast-workers", "2", "--real-workers", "1", "--machine",
                           "a test machine", "--main-at", "abc1234", "--date", "2026-12-04", "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text(encoding="utf-8")) == {
        "date": "2026-12-04", "machine": "a test machine", "main_at": "abc1234", "setup_s": 180.0,
        "fast": {"passed": 7, "failed": 2, "skipped": 1, "xfailed": 2, "seconds": 61.2, "workers": 2,
                 "slowest_files": [{"file": "t.py", "seconds": 0.0, "tests": 3}]},
        "real_engine": {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "seconds": 0.5, "workers": 1,
                        "slowest_files": []},
        "total_s": 245.4}
    # The file renders: the README's sentence counts every test of a part, whatever its outcome.
    module = figures()
    results = tmp_path / "results"
    results.mkdir()
    shutil.copy(out, results / "suite.json")
    sentence = module.render_suite(module.Results(results))
    assert "the fast part 12 tests in 1 min 1 s (2 workers)" in sentence and "4 min" in sentence


def test_a_missing_junit_file_is_an_error_not_an_empty_suite(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--suite-from-junit", str(tmp_path / "fast.xml"),
                           str(tmp_path / "real.xml"), "--setup-s", "1", "--total-s", "2", "--out",
                           str(tmp_path / "suite.json")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no such junit file" in done.stderr
    assert not (tmp_path / "suite.json").exists()


def test_the_slowest_files_add_up_their_tests_and_come_longest_first(tmp_path: Path) -> None:
    """Bug caught: "where the time goes" naming a file by one test's time, or in junit order, so the docs and
    LONGEST_FILES_FIRST point at the wrong files."""
    path = tmp_path / "real.xml"
    cases = [("tests.real.test_a", 30.0), ("tests.commands.test_b", 50.0), ("tests.real.test_a", 40.0)]
    body = "".join(f'<testcase classname="{name}" name="c{n}" time="{seconds}"/>'
                   for n, (name, seconds) in enumerate(cases))
    path.write_text(f'<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="0" tests="3" '
                    f'time="90">{body}</testsuite></testsuites>', encoding="utf-8")
    assert figures().junit_part(path, 2)["slowest_files"] == [
        {"file": "tests/real/test_a.py", "seconds": 70.0, "tests": 2},
        {"file": "tests/commands/test_b.py", "seconds": 50.0, "tests": 1}]
