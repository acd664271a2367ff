"""What the benchmarks and checks measure and report, without an engine: fp8 bench, KV scales and
quality, the saturation sweep, their tables, plots and job lines."""
