"""The `nalar` subcommands, one module each: cli (the parser), fp8_bench (`nalar bench`), saturation
(`bench saturation`), bench (the developer benchmarks, which alone may use Qt: `bench ui` drives the
window), kv_check (`kv-check`, `calibrate`), doctor, download. Long ones run through jobs.py, the one
job runner. What they measure and report, without an engine, lives in app/core."""
