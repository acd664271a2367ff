"""The `nalar` command: the desktop app by default, plus the subcommands in this folder (one module each)."""

from __future__ import annotations

import time

PROCESS_STARTED = time.perf_counter()

import argparse  # noqa: E402  (the timer above measures start-up from the first line)
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import TypeVar  # noqa: E402

from app.core.settings.logs import configure_logging  # noqa: E402

Number = TypeVar("Number", int, float)


def _positive_list(convert: Callable[[str], Number]) -> Callable[[str], list[Number]]:
    """An argparse type for "1024,4096": positive numbers separated by commas."""
    def parse(text: str) -> list[Number]:
        try:
            values = [convert(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
        if not values or min(values) <= 0:
            raise argparse.ArgumentTypeError(f"expected positive numbers, got {text!r}")
        return values

    return parse


_int_list, _float_list = _positive_list(int), _positive_list(float)


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and its options; each runs in its own module of this folder."""
    parser = argparse.ArgumentParser(prog="nalar", description="Run reasoning models locally on vLLM.")
    parser.add_argument("--report-startup", action="store_true", help="print when the window is shown")
    sub = parser.add_subparsers(dest="command")
    bench = sub.add_parser(
        "bench", help="measure the configured model with KV dtype auto and fp8 (or a developer benchmark)",
        description="Without WHAT: the FP8 KV benchmark of the configured model (TTFT, ms/token by context "
                    "depth, KV capacity, bandwidth floor), saved as JSON and PNG in the data dir. "
                    "saturation: how many chats of what length fit; engine|ui|startup|trim|all: the developer "
                    "benchmarks.")
    bench.add_argument("what", nargs="?",
                       choices=["saturation", "engine", "ui", "startup", "trim", "memory", "maths", "spec", "history",
                                "compare", "hostile", "knowledge", "knowledge-window", "models", "all"],
                       help="saturation: how many chats of what length fit before tokens slow down (KV knee, "
                            "latency knee, per KV dtype); memory: host memory bandwidth and the CPU models' "
                            "tok/s ceiling; maths: the answer pane's LaTeX coverage on SymPy's corpus; spec: "
                            "each speculative decoding method vLLM accepts here against none (tok/s per phase, "
                            "acceptance, where greedy text parts; --kv-dtypes' first dtype); compare: a Compare's "
                            "three variants at once vs one after another (--tokens: budget and answer, default 64); "
                            "hostile: each hostile input given to the window (stall, time to the answer, what is left "
                            "running; --only NAME…); knowledge: index 1,000 pages and 50 PDFs, sync, 100 queries; "
                            "knowledge-window: the window's longest stall while Knowledge… indexes them; models: the "
                            "model browser's search to verdicts on screen, cold and cached, against a fake hub; "
                            "engine|ui|startup|trim|all: developer benchmarks")
    bench.add_argument("--tokens", type=int, default=None,
                       help="decode tokens per measurement (FP8 bench: 64; developer benches: 256)")
    bench.add_argument("--json", action="store_true", help="print results as JSON")
    bench.add_argument("--only", nargs="+", metavar="NAME", default=None,
                       help="`bench hostile`: only these cases (an unknown name lists them)")
    bench.add_argument("--progress-jsonl", action="store_true", help="write job lines (progress, result) on stdout")
    bench.add_argument("--depths", type=_int_list, default=None, help="context depths, e.g. 1024,4096,8192")
    bench.add_argument("--kv-dtypes", type=lambda text: [t.strip() for t in text.split(",") if t.strip()],
                       default=None, help="KV dtypes to compare (default auto,fp8_e4m3)")
    bench.add_argument("--model", default=None, help="model folder or hub id (default: the settings' model)")
    bench.add_argument("--max-model-len", type=int, default=None,
                       help="context length for the FP8 bench (default: the settings'); depths must fit in it")
    saturation = bench.add_argument_group("saturation sweep (`nalar bench saturation`)")
    saturation.add_argument("--contexts", type=_int_list, default=None, help="context lengths, e.g. 256,512,768")
    saturation.add_argument("--concurrency", type=_int_list, default=None, help="concurrent chats, e.g. 1,2,4,8")
    saturation.add_argument("--rounds", type=int, default=None, help="requests per client in the closed loop")
    saturation.add_argument("--kv-pool-mib", type=int, default=None,
                            help="CPU KV pool for the sweep (default 32: small enough to fill)")
    saturation.add_argument("--target-ms", type=_float_list, default=None,
                            help="p95 ms/token targets (GPU default 100,250)")
    saturation.add_argument("--target-x", type=_float_list, default=None,
                            help="targets as multiples of the single-stream p95 (CPU default 2)")
    saturation.add_argument("--keep-series", action="store_true", help="also save every cell's per-step series")
    doctor = sub.add_parser("doctor", help="check that Nalar can run here, and with what")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument("--gpu", action="store_true", help="the GPU engine's first-start checklist, with fixes")
    doctor.add_argument("--first-start", action="store_true",
                        help="with --gpu: start the engine once and record each phase's time and ms/token")
    doctor.add_argument("--speculative", choices=["off", "ngram", "suffix", "draft_model"], default=None,
                        help="with --first-start: this speculative decoding method instead of the setting's")
    download = sub.add_parser("download", help="download a model from the Hugging Face hub (resumable); "
                                                "see also `nalar models`")
    download.add_argument("repo_id", help="for example deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    download.add_argument("--revision", default="main", help="branch, tag or commit")
    download.add_argument("--use", action="store_true", help="make it Nalar's model once downloaded")
    models = sub.add_parser("models", help="search the hub with this machine's fit verdicts, list or delete models",
                            description="The model family of commands: `models search` (the hub, with each file "
                                        "set's fit on this machine), `models list` (the library), `models rm`; "
                                        "`nalar download REPO` downloads one (resumable).")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    found = models_sub.add_parser("search", help="search the hub; each result's file sets with their fit here")
    found.add_argument("query", help="words in the model's name, e.g. qwen3")
    found.add_argument("--json", action="store_true", help="print results as JSON")
    found.add_argument("--sort", choices=["downloads", "trending"], default="downloads", help="order (downloads)")
    found.add_argument("--only-fits", action="store_true", help="only models with a set that fits this machine")
    found.add_argument("--limit", type=int, default=20, help="most results (default 20)")
    listed = models_sub.add_parser("list", help="the library: Nalar's downloads, the HF cache, your folders")
    listed.add_argument("--json", action="store_true", help="print the library as JSON")
    remove = models_sub.add_parser("rm", help="delete a downloaded or cached model (asks first)")
    remove.add_argument("model_id", help="a repo id or path from `nalar models list`")
    remove.add_argument("--yes", action="store_true", help="don't ask")
    history = sub.add_parser("history", help="search or export the conversation history from a terminal")
    history_sub = history.add_subparsers(dest="history_command", required=True)
    search = history_sub.add_parser("search", help="full-text search (bm25 order, matches in [brackets])")
    search.add_argument("query", help="words that must all appear (the last may be the start of a word)")
    search.add_argument("--json", action="store_true", help="print results as JSON")
    search.add_argument("--thinking", action="store_true", help="search the thinking traces too")
    search.add_argument("--limit", type=int, default=50, help="most results (default 50)")
    export = history_sub.add_parser("export", help="print a conversation (the newest, or ID) as Markdown or JSON")
    export.add_argument("id", nargs="?", help="a conversation id or its start (default: the newest)")
    export.add_argument("--all", action="store_true", help="every conversation")
    export.add_argument("--format", choices=["md", "json"], default="md", help="md (default) or json")
    imports = history_sub.add_parser("import", help="add conversations from a Nalar JSON export or a message list")
    imports.add_argument("file", help="a .json file: `nalar history export --format json` output, or "
                                      "[{\"role\": …, \"content\": …}, …]")
    knowledge = sub.add_parser("knowledge", help="folders of your documents, indexed for questions (collections)")
    knowledge_sub = knowledge.add_subparsers(dest="knowledge_command", required=True)
    k_add = knowledge_sub.add_parser("add", help="add folders to a collection (made if new) and index them")
    k_add.add_argument("name", help="the collection's name, e.g. notes")
    k_add.add_argument("folders", nargs="+", metavar="DIR", help="folders whose files are indexed")
    knowledge_sub.add_parser("sync", help="read again what changed in a collection's folders").add_argument("name")
    knowledge_sub.add_parser("list", help="the collections, with their counts").add_argument(
        "--json", action="store_true", help="print them as JSON")
    k_search = knowledge_sub.add_parser("search", help="the passages that best match a query (BM25, or hybrid: "
                                        "BM25 + an embedding model's vectors when one is found)")
    k_search.add_argument("name", help="the collection")
    k_search.add_argument("query", help="words to look for (any text; operators are only words)")
    k_search.add_argument("--json", action="store_true", help="print the passages as JSON")
    k_search.add_argument("--limit", type=int, default=8, help="most passages (default 8)")
    k_search.add_argument("--ranking", choices=("auto", "bm25", "hybrid"), default="auto",
                          help="auto (default): hybrid when an embedding model is found, else BM25")
    knowledge_sub.add_parser("embedder", help="the embedding model for hybrid ranking: shown, or chosen (a "
                             "sentence-transformers folder, off, or auto: found on its own)").add_argument(
        "name", nargs="?", metavar="PATH|off|auto", help="a model folder, off, or auto; none: show what is used")
    knowledge_sub.add_parser("rm", help="remove a collection and its index (not its files)").add_argument("name")
    for name, text in (("kv-check", "how much an FP8 KV cache changes this model's next-token choices"),
                       ("calibrate", "compute per-layer FP8 KV scales and write a calibrated model folder")):
        job = sub.add_parser(name, help=text)
        job.add_argument("--model", help="model folder (default: the configured model)")
        job.add_argument("--prompts", type=int, default=3, choices=range(1, 4), help="reasoning prompts to score")
        job.add_argument("--tokens", type=int, default=128, help="continuation tokens scored per prompt")
        job.add_argument("--json", action="store_true", help="print the report as JSON")
        job.add_argument("--progress-jsonl", action="store_true", help="speak the app's job-line protocol")
        if name == "kv-check":
            job.add_argument("--engine", action="store_true",
                             help="also run the prompts on the real engine, auto and fp8_e4m3 KV: loop rate and "
                                  "leading tokens that agree")
            job.add_argument("--engine-tokens", type=int, default=512, help="most tokens per real-engine request")
            job.add_argument("--seeds", type=int, default=3, help="seeded samples at temperature 0.6 per prompt")
            job.add_argument("--engine-prompts", type=int, default=8, choices=range(1, 9),
                             help="real-engine prompts: the 3 reasoning prompts, then 5 word problems")
        if name == "calibrate":
            job.add_argument("--out", help="where to write the calibrated folder (default: next to the model)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return exit_code_without_teardown(run_command(args))


def exit_code_without_teardown(code: int) -> int:
    """After a command that ran vLLM in this process, leave without the interpreter's teardown: tearing down
    triton's and torch's extension modules only prints leak reports ("nanobind: leaked …") and takes time."""
    if "triton" in sys.modules or "vllm" in sys.modules:
        import logging
        import os

        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command (the desktop app without one)."""
    if args.command == "doctor":
        if args.gpu:
            from app.commands.gpu_doctor import run_first_start, run_gpu_doctor

            return run_first_start(256, args.speculative) if args.first_start else run_gpu_doctor(args.json)
        from app.commands.doctor import run_doctor

        return run_doctor(args.json)
    configure_logging()
    if args.command == "history":
        from app.commands.history.history_cli import run_export, run_import, run_search

        if args.history_command == "import":
            return run_import(args.file)
        if args.history_command == "search":
            return run_search(args.query, as_json=args.json, thinking=args.thinking, limit=args.limit)
        return run_export(args.id, everything=args.all, kind=args.format)
    if args.command == "knowledge":
        from app.commands.knowledge.knowledge_cli import run_knowledge

        return run_knowledge(args.knowledge_command, getattr(args, "name", None), getattr(args, "folders", []),
                             getattr(args, "query", None), as_json=getattr(args, "json", False),
                             limit=getattr(args, "limit", 8), ranking=getattr(args, "ranking", "auto"))
    if args.command in ("kv-check", "calibrate"):
        from app.commands.kv_check import run_calibrate, run_kv_check

        if args.command == "kv-check":
            return run_kv_check(args.model, prompts=args.prompts, tokens=args.tokens, as_json=args.json,
                                jsonl=args.progress_jsonl, engine=args.engine, engine_tokens=args.engine_tokens,
                                seeds=args.seeds, engine_prompts=args.engine_prompts)
        return run_calibrate(args.model, args.out, prompts=args.prompts, tokens=args.tokens, as_json=args.json,
                             jsonl=args.progress_jsonl)
    if args.command == "models":
        from app.commands.models import models_cli

        if args.models_command == "search":
            return models_cli.run_search(args.query, as_json=args.json, sort=args.sort, only_fits=args.only_fits,
                              limit=args.limit)
        if args.models_command == "list":
            return models_cli.run_list(as_json=args.json)
        return models_cli.run_rm(args.model_id, yes=args.yes)
    if args.command == "download":
        from app.commands.download import run_download_command

        return run_download_command(args.repo_id, use=args.use, revision=args.revision)
    if args.command == "bench" and args.what is None:
        from app.commands.fp8_bench import run_fp8_bench_command
        from app.core.measure.fp8_bench import DEFAULT_DEPTHS, DEFAULT_KV_DTYPES

        return run_fp8_bench_command(depths=args.depths or DEFAULT_DEPTHS, tokens=args.tokens or 64,
                                     kv_dtypes=args.kv_dtypes or DEFAULT_KV_DTYPES, as_json=args.json,
                                     progress_jsonl=args.progress_jsonl, model=args.model,
                                     max_model_len=args.max_model_len)
    if args.command == "bench" and args.what == "saturation":
        from app.commands.saturation import run_saturation_command
        from app.core.measure.fp8_bench import DEFAULT_KV_DTYPES

        return run_saturation_command(
            contexts=args.contexts, concurrency=args.concurrency, tokens=args.tokens, rounds=args.rounds,
            kv_pool_mib=args.kv_pool_mib, target_ms=args.target_ms, target_x=args.target_x,
            kv_dtypes=args.kv_dtypes or DEFAULT_KV_DTYPES, as_json=args.json, progress_jsonl=args.progress_jsonl,
            model=args.model, max_model_len=args.max_model_len, keep_series=args.keep_series)
    if args.command == "bench" and args.what == "history":
        from app.commands.history.history_bench import run_history_bench

        return run_history_bench(as_json=args.json)
    if args.command == "bench" and args.what == "maths":
        from app.commands.bench_maths import run_maths_bench

        return run_maths_bench(as_json=args.json)
    if args.command == "bench" and args.what == "spec":
        from app.commands.speculation.spec_bench import run_spec_bench

        return run_spec_bench(tokens=args.tokens or 256, kv_cache_dtype=(args.kv_dtypes or ["auto"])[0],
                              as_json=args.json)
    if args.command == "bench" and args.what == "compare":
        from app.commands.compare.compare_bench import run_compare_bench

        return run_compare_bench(tokens=args.tokens or 64, as_json=args.json)
    if args.command == "bench" and args.what == "knowledge":
        from app.commands.knowledge.knowledge_bench import run_knowledge_bench

        return run_knowledge_bench(as_json=args.json)
    if args.command == "bench" and args.what == "knowledge-window":
        from app.commands.window_bench.knowledge_stall import run_knowledge_window_bench

        return run_knowledge_window_bench(as_json=args.json)
    if args.command == "bench" and args.what == "hostile":
        from app.commands.hostile.hostile_bench import run_hostile_bench

        return run_hostile_bench(args.only, as_json=args.json)
    if args.command == "bench" and args.what == "models":
        from app.commands.window_bench.models_bench import run_models_bench

        return run_models_bench(as_json=args.json)
    if args.command == "bench":
        from app.commands.bench import run_bench

        return run_bench(args.what, tokens=args.tokens or 256, as_json=args.json)

    from app.ui.app_main import run_app

    return run_app([sys.argv[0]], process_started=PROCESS_STARTED, report_startup=args.report_startup)
