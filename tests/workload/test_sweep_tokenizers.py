"""One sweep, three tokenizers: `loadgen --tokenizer X` against the embedded simulator
builds prompts of exactly --isl tokens with a 4k byte-level BPE, a Unigram/Metaspace
(SentencePiece-style) tokenizer and DeepSeek-V4's (as a Hub id from the Hub cache), and
says so in the results; a tokenizer that merges words gets fitted prompts, still exact;
one with no exact length says how far off each point's prompts are.

The embedded simulator stays the DeepSeek-V4 server it is, so with the other tokenizers
its own prompt counts differ (a tokenizer-mismatch warning is expected): the exactness
of what was sent is proven by re-tokenizing the very bodies the sweep built (same spec,
same seed: `Workload.point` is deterministic).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.config.args import spec_from_argv
from loadgen.run.probe import body_options
from loadgen.tokenizer import bundled_tokenizer_path, load_tokenizer
from loadgen.workload.plan import Workload

ISL, OSL = 300, 4
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def sweep_args(tokenizer: str, results: Path, *extra: str) -> list[str]:
    return [
        "--sim",
        "--conc",
        "1,3",
        "--isl",
        str(ISL),
        "--osl",
        str(OSL),
        "--range-ratio",
        "1.0",
        "--prompts-per-conc",
        "3",
        "--warmup-per-conc",
        "1",
        "--endpoint",
        "completions",
        "--tokenizer",
        tokenizer,
        "--results",
        str(results),
        "--no-progress",
        *extra,
    ]


def run_loadgen(
    args: list[str],
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


def points(results: Path) -> list[dict[str, Any]]:
    return [orjson.loads(p.read_bytes()) for p in sorted(results.glob("conc_*.json"))]


def sent_prompt_lengths(args: list[str], tokenizer: str) -> list[int]:
    """Token counts of the prompts the sweep sent, re-tokenized from the request bodies."""
    spec = spec_from_argv(args, env={})
    tok = load_tokenizer(tokenizer, check_dsv4=spec.workload.encoder == "dsv4")
    workload = Workload(spec, tok, body_options(spec))
    bodies = [
        orjson.loads(r.body)
        for conc in spec.load.conc
        for r in (*workload.point(conc).warmup, *workload.point(conc).measured)
    ]
    return [
        len(e.ids)
        for e in tok.encode_batch([b["prompt"] for b in bodies], add_special_tokens=False)
    ]


@pytest.mark.parametrize(
    ("name", "encoder", "synthesis"),
    [("bpe4k", "raw", "words"), ("unigram", "raw", "words"), ("merging", "raw", "fitted")],
)
def test_sweep_with_a_built_tokenizer_sends_exact_lengths(
    name: str,
    encoder: str,
    synthesis: str,
    built_tokenizers: dict[str, Path],
    tmp_path: Path,
) -> None:
    tokenizer = str(built_tokenizers[name])
    args = sweep_args(tokenizer, tmp_path / "results", "--encoder", encoder)
    done = run_loadgen(args)
    assert done.returncode == 0, done.stderr
    assert "TOKENIZER MISMATCH" in done.stderr  # the simulator counts with DeepSeek-V4's
    results = points(tmp_path / "results")
    assert [p["max_concurrency"] for p in results] == [1, 3]
    for point in results:
        assert point["input_lens"] == [ISL] * point["num_prompts"]
        assert point["prompt_synthesis"] == synthesis
        assert point["input_len_approximate"] is False
        assert point["input_len_mismatches"] == point["input_len_max_abs_diff"] == 0
        if synthesis == "fitted":
            assert "merges adjacent words" in point["prompt_synthesis_note"]
        else:
            assert point["prompt_synthesis_note"] is None
    assert sent_prompt_lengths(args, tokenizer) == [ISL] * (1 * 4 + 3 * 4)


def test_sweep_with_the_dsv4_tokenizer_as_a_hub_id_from_the_cache(tmp_path: Path) -> None:
    repo = tmp_path / "hf" / "hub" / "models--deepseek-ai--DeepSeek-V4-Pro"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "snapshots" / COMMIT / "tokenizer.json").write_bytes(
        bundled_tokenizer_path().read_bytes()
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    args = sweep_args("deepseek-ai/DeepSeek-V4-Pro", tmp_path / "results")
    done = run_loadgen(args, env)
    assert done.returncode == 0, done.stderr
    assert "TOKENIZER MISMATCH" not in done.stderr
    for point in points(tmp_path / "results"):
        assert point["input_lens"] == [ISL] * point["num_prompts"]
        assert point["prompt_synthesis"] == "words" and point["input_len_approximate"] is False
        # the simulator tokenizes with the same tokenizer: its usage agrees on every request
        assert point["prompt_tokens_mismatches"] == 0 and point["prompt_tokens_unreported"] == 0
    assert sent_prompt_lengths(args, str(bundled_tokenizer_path())) == [ISL] * 16


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_tokenizer_without_exact_lengths_is_flagged_approximate(
    tmp_path: Path, workers: str
) -> None:
    """WordLevel without a pre-tokenizer: any text with a space is one unknown token.
    With two worker processes the figures come from their records, the same."""
    from tokenizers import Tokenizer, models

    words = {"[unk]": 0} | {
        a + b: i + 1 for i, (a, b) in enumerate((a, b) for a in "abcdefgh" for b in "abcdefgh")
    }
    path = tmp_path / "tokenizer.json"
    Tokenizer(models.WordLevel(words, unk_token="[unk]")).save(str(path))
    done = run_loadgen(
        sweep_args(str(path), tmp_path / "results", "--encoder", "raw", "--workers", workers)
    )
    assert done.returncode == 0, done.stderr
    assert "not of the requested length" in done.stderr
    for point in points(tmp_path / "results"):
        assert point["input_len_approximate"] is True
        assert point["input_len_mismatches"] == point["num_prompts"]
        assert point["input_len_max_abs_diff"] == ISL - 1
        assert point["input_lens"] == [1] * point["num_prompts"]  # the true lengths
        assert point["prompt_synthesis"] == "fitted"
