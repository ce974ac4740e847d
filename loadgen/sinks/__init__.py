"""Stage 6: where results go. Result files, JSONL, table, CSV, plot, progress, Prometheus."""
