"""The run tests' shared fixtures, for the persist tests too."""

from tests.run.conftest import tokenizer

__all__ = ["tokenizer"]
