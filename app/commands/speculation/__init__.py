"""`nalar bench spec`: speculative decoding measured side by side with none (spec_bench runs the engines,
spec_report holds the arithmetic and the table)."""
