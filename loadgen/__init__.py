"""loadgen: a measurement instrument for LLM serving."""

__version__ = "0.1.0"
