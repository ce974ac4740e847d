"""Stage 3: the wire. Preflight, sending, arrival stamping, SSE framing, event decoding."""
