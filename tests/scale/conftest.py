"""The run tests' shared fixtures, for the scale tests too."""

from tests.run.conftest import tokenizer

__all__ = ["tokenizer"]
