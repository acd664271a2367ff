"""`nalar bench maths`: how much of an outside LaTeX corpus the answer pane's renderer draws, and how fast.

The corpus is SymPy's own: the LaTeX its printer is tested to write (printing/tests/test_latex.py) and the
LaTeX its parser is tested to read (parsing/tests/test_latex.py), from the installed sympy (a dependency of
torch). Nobody here wrote it. The renderer is the one the pane uses (ziamath, SVG 1.1 paths for QtSvg);
drawing that SVG with QtSvg is not timed here (a window test checks it draws).

Also the synthetic text `nalar bench ui` streams through the window, with and without formulas.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CORPUS_FILES = ("printing/tests/test_latex.py", "parsing/tests/test_latex.py")


@dataclass(frozen=True)
class MathsCoverage:
    corpus: str
    formulas: int
    drawn: int
    median_ms: float
    p95_ms: float
    slowest_ms: float
    failures: tuple[str, ...]  # the first few formulas not drawn, for the record

    @property
    def share(self) -> float:
        return self.drawn / self.formulas if self.formulas else 0.0


def sympy_latex_corpus() -> list[str]:
    """Every LaTeX string literal SymPy's LaTeX tests compare against or parse, deduplicated, in file order."""
    spec = importlib.util.find_spec("sympy")
    if spec is None or spec.origin is None:
        raise RuntimeError("sympy is not installed; it comes with torch (make setup)")
    root = Path(spec.origin).parent
    seen: dict[str, None] = {}
    for name in CORPUS_FILES:
        tree = ast.parse((root / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and len(node.comparators) == 1:
                candidates = [node.comparators[0], node.left]
            elif isinstance(node, ast.Tuple) and node.elts:
                candidates = [node.elts[0]]  # GOOD_PAIRS: (latex, expression)
            else:
                continue
            for candidate in candidates:
                if isinstance(candidate, ast.Constant) and isinstance(candidate.value, str) \
                        and "\\" in candidate.value and len(candidate.value) < 400:
                    seen.setdefault(candidate.value.strip().strip("$"), None)
    return [latex for latex in seen if latex]


_UNKNOWN_COMMAND = re.compile(r">\\[A-Za-z]+<")  # MathML text that is still a TeX command: not understood


def measure(corpus: list[str], corpus_name: str) -> MathsCoverage:
    """Drawn means: ziamath made the SVG, and no TeX command was left over as text in its MathML."""
    import latex2mathml.converter

    from app.core.formula_worker import formula_svg  # the pane's own drawing

    times, failures, drawn = [], [], 0
    for latex in corpus:
        started = time.perf_counter()
        try:
            svg, _ = formula_svg(latex, display=False)
            understood = svg is not None and not _UNKNOWN_COMMAND.search(latex2mathml.converter.convert(latex))
        except Exception:  # noqa: BLE001 - any refusal counts as not covered
            understood = False
        times.append((time.perf_counter() - started) * 1000)
        if understood:
            drawn += 1
        else:
            failures.append(latex)
    ordered = sorted(times)
    return MathsCoverage(corpus_name, len(corpus), drawn, round(statistics.median(ordered), 2),
                         round(ordered[int(0.95 * (len(ordered) - 1))], 2), round(ordered[-1], 2),
                         tuple(failures[:12]))


def run_maths_bench(as_json: bool = False) -> int:
    corpus = sympy_latex_corpus()
    result = measure(corpus, "sympy printing + parsing LaTeX tests")
    if as_json:
        print(json.dumps({**asdict(result), "share": round(result.share, 4)}, indent=2))
        return 0
    print(f"corpus: {result.corpus} ({result.formulas} formulas)")
    print(f"drawn:  {result.drawn} ({result.share:.1%})")
    print(f"time per formula: median {result.median_ms} ms, p95 {result.p95_ms} ms, slowest {result.slowest_ms} ms")
    for latex in result.failures:
        print(f"  not drawn: {latex}")
    return 0


# ---- the UI bench's synthetic streams (nalar bench ui: ui-synthetic, ui-synthetic-maths) ----------------

def synthetic_words(count: int) -> list[str]:
    """Model-like text that doesn't loop: a line break every 12 tokens, a paragraph every 60, and words
    drawn at random from 1,000 made-up ones. The loop guard rightly cuts "t1 t2 … t12" lines as a loop
    (numbers are masked), and then the benchmark timed 0.1 s of a 10 s stream."""
    import random

    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "pe", "du"]
    vocabulary = [a + b + c for a in syllables for b in syllables for c in syllables]
    pick = random.Random(0).choice
    return [pick(vocabulary) + ("\n\n" if i % 60 == 59 else "\n" if i % 12 == 11 else " ") for i in range(count)]


# Formulas as a reasoning model streams them, each split over tokens (so the stream's edge stops inside one):
# inline and display, \frac, \int, \sum, a matrix, cases, \boxed. {n} varies so no two are the same text.
FORMULA_TOKENS = (
    ("$\\int_0^{{{n}}}", " x^2", "\\,dx", " = \\frac{{{n}^3}}{{3}}$ "),
    ("\\(\\sum_{{k=1}}^{{{n}}}", " k = \\frac{{{n}({n}+1)}}{{2}}", "\\) "),
    ("\n\n$$\\begin{{pmatrix}} {n} & 2 \\\\", " 3 & 4 \\end{{pmatrix}}", "$$\n\n"),
    ("\n\n\\[f(x) = \\begin{{cases}} x^{{{n}}} &", " x > 0 \\\\ 0 & \\text{{otherwise}}", " \\end{{cases}}\\]\n\n"),
    ("$\\boxed{{", "{n}", "}}$ "),
    ("$\\alpha + \\hat{{\\beta}}_{{{n}}}$ ",),
)


def synthetic_maths(count: int) -> list[str]:
    """``synthetic_words`` with a formula's tokens after every 20th word: the answer as a maths answer streams."""
    words, out = synthetic_words(count), []
    for i, word in enumerate(words):
        out.append(word)
        if i % 20 == 19 and len(out) < count:
            pieces = FORMULA_TOKENS[(i // 20) % len(FORMULA_TOKENS)]
            out += [piece.format(n=i) for piece in pieces]
    return out[:count]
