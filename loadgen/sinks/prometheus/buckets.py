"""The exporter's label sets and histogram buckets (shared by every instrument module)."""

POINT_LABELS = ("model_name", "endpoint", "conc")
RUN_LABELS = ("model_name", "endpoint")
# Chunk gaps: ~100 us (MTP bursts, loopback) to seconds (prefill stalls, preemption).
ITL_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03,
    0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)
# First token: milliseconds on an idle server to minutes when 512 long prompts queue.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0,
)
# Whole requests: osl 1024 at 20 tok/s/user is ~50 s; long sweeps reach many minutes.
E2E_BUCKETS = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    90.0, 120.0, 180.0, 240.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 3600.0,
)
QUEUE_BUCKETS = (
    0.00001, 0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
)
LOOP_LAG_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0,
)
# Integer token counts: `le="2.0"` counts chunks of at most 2 tokens (1 accepted draft).
CHUNK_TOKEN_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 64)
MAX_POSITIONS = 16  # draft positions tracked per chunk; caps the `position` label
