"""The run tests' shared fixtures, for the merge tests too."""

from tests.run.conftest import tokenizer

__all__ = ["tokenizer"]
