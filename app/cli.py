"""The `nalar` command: the desktop app by default, plus `nalar bench …`, `nalar doctor`, `nalar download`."""

from __future__ import annotations

import time

PROCESS_STARTED = time.perf_counter()

import argparse  # noqa: E402  (the timer above measures start-up from the first line)
import logging  # noqa: E402
import sys  # noqa: E402


def _configure_logging() -> None:
    from logging.handlers import RotatingFileHandler

    from app.core import paths

    folder = paths.log_dir()
    folder.mkdir(parents=True, exist_ok=True)
    handler = RotatingFileHandler(folder / "nalar.log", maxBytes=2_000_000, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    console = logging.StreamHandler()
    console.setLevel(logging.WARNING)
    root.addHandler(console)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="nalar", description="Run reasoning models locally on vLLM.")
    parser.add_argument("--report-startup", action="store_true", help="print when the window is shown")
    sub = parser.add_subparsers(dest="command")
    bench = sub.add_parser("bench", help="measure the engine and the UI")
    bench.add_argument("what", choices=["engine", "ui", "startup", "all"], help="which benchmark")
    bench.add_argument("--tokens", type=int, default=256, help="tokens per engine run")
    bench.add_argument("--json", action="store_true", help="print results as JSON")
    doctor = sub.add_parser("doctor", help="check that Nalar can run here, and with what")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    download = sub.add_parser("download", help="download a model from the Hugging Face hub (resumable)")
    download.add_argument("repo_id", help="for example deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    download.add_argument("--revision", default="main", help="branch, tag or commit")
    download.add_argument("--use", action="store_true", help="make it Nalar's model once downloaded")
    for name, text in (("kv-check", "how much an FP8 KV cache changes this model's next-token choices"),
                       ("calibrate", "compute per-layer FP8 KV scales and write a calibrated model folder")):
        job = sub.add_parser(name, help=text)
        job.add_argument("--model", help="model folder (default: the configured model)")
        job.add_argument("--prompts", type=int, default=3, choices=range(1, 4), help="reasoning prompts to score")
        job.add_argument("--tokens", type=int, default=128, help="continuation tokens scored per prompt")
        job.add_argument("--json", action="store_true", help="print the report as JSON")
        job.add_argument("--progress-jsonl", action="store_true", help="speak the app's job-line protocol")
        if name == "calibrate":
            job.add_argument("--out", help="where to write the calibrated folder (default: next to the model)")
    args = parser.parse_args(argv)
    if args.command == "doctor":
        from app.doctor import run_doctor

        return run_doctor(args.json)
    _configure_logging()
    if args.command in ("kv-check", "calibrate"):
        from app.kv_check import run_calibrate, run_kv_check

        if args.command == "kv-check":
            return run_kv_check(args.model, prompts=args.prompts, tokens=args.tokens, as_json=args.json,
                                jsonl=args.progress_jsonl)
        return run_calibrate(args.model, args.out, prompts=args.prompts, tokens=args.tokens, as_json=args.json,
                             jsonl=args.progress_jsonl)
    if args.command == "download":
        from app.core.hub_download import run_download_command

        return run_download_command(args.repo_id, use=args.use, revision=args.revision)
    if args.command == "bench":
        from app.bench import run_bench

        return run_bench(args.what, tokens=args.tokens, as_json=args.json)

    from app.ui.app_main import run_app

    return run_app([sys.argv[0]], process_started=PROCESS_STARTED, report_startup=args.report_startup)
