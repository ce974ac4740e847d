"""Stage 2: what to send. Prompts (encoders + tokenizer), request bodies, per-point plans."""
