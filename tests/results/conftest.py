"""The run tests' shared fixtures, for the results tests too."""

from tests.run.conftest import tokenizer

__all__ = ["tokenizer"]
