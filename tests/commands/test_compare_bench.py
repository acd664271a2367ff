"""`nalar bench compare` is reachable from the command line (the bench itself runs the real engine: BENCHMARKS.md)."""

from __future__ import annotations

from app.commands.cli import build_parser


def test_bench_compare_is_a_bench_choice() -> None:
    """Bug caught: the compare bench written but not offered by `nalar bench`, so its figures can't be remade."""
    args = build_parser().parse_args(["bench", "compare", "--tokens", "32"])
    assert (args.command, args.what, args.tokens) == ("bench", "compare", 32)
