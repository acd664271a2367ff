"""`nalar bench maths`: the outside corpus is found, and "drawn" means understood, not merely no exception."""

from __future__ import annotations

from app.commands.bench_maths import measure, sympy_latex_corpus


def test_the_corpus_is_sympys_own_latex() -> None:
    """Bug caught: a corpus loader that found nothing (a moved test file) would report 0 of 0 as full coverage."""
    corpus = sympy_latex_corpus()
    assert len(corpus) > 500 and len(set(corpus)) == len(corpus)
    assert any("\\frac" in latex for latex in corpus) and any("matrix" in latex for latex in corpus)


def test_a_formula_is_drawn_only_when_every_command_is_understood() -> None:
    """Bug caught: counting any formula ziamath returned SVG for, though it wrote an unknown command as its
    name in text, overstated coverage."""
    result = measure(["\\frac{1}{2}", "\\root{3}{x}", "\\notacommand{x}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"],
                     "four")
    assert (result.formulas, result.drawn) == (4, 2)
    assert result.failures == ("\\root{3}{x}", "\\notacommand{x}")
