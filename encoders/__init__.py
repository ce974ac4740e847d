"""Prompt encoders: chat messages -> the exact prompt text a model was trained on."""
