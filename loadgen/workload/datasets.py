"""Dataset files -> conversations to send (prompt messages, and the output length they ask for).

Three formats, told apart by content unless the user names one (`--dataset-name`):
- ShareGPT JSON, as vLLM `bench serve --dataset-name sharegpt` reads it: a JSON list of
  entries whose `conversations` is a list of {from, value}; entries with fewer than two
  turns are skipped; the first turn is the prompt (one user message), the second the
  reference answer, whose token count is the output length when --osl is not given.
- JSONL, one item per line: an OpenAI `messages` list, an object with `messages`, or
  vLLM's custom dataset object {prompt, output_tokens?}.
vLLM additionally drops ShareGPT pairs by length (`is_valid_sequence`); `VLLM_SHAREGPT_LIMITS`
holds its bounds, which the workload applies with `--dataset-name sharegpt`.

A dataset is read into memory whole and each conversation is tokenized in one piece, so
both are bounded before any tokenizing: the file by MAX_DATASET_BYTES, each conversation
(a JSONL line, a ShareGPT prompt and answer) by MAX_CONVERSATION_BYTES.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadgen.config.spec import MAX_CONVERSATION_BYTES, MAX_DATASET_BYTES, SpecError


@dataclass(frozen=True, slots=True)
class Conversation:
    """One dataset item: the messages to send and where its output length comes from."""

    messages: list[dict[str, Any]]
    answer: str | None = None  # ShareGPT's reference answer (its tokens = output length)
    output_tokens: int | None = None  # vLLM custom `output_tokens`


@dataclass(frozen=True, slots=True)
class LengthLimits:
    """vLLM's ShareGPT pruning (benchmarks/datasets.py `is_valid_sequence` defaults)."""

    min_len: int = 4
    max_prompt_len: int = 1024
    max_total_len: int = 2048

    def keeps(self, prompt_len: int, output_len: int, *, output_given: bool) -> bool:
        too_short = prompt_len < self.min_len or (not output_given and output_len < self.min_len)
        too_long = prompt_len > self.max_prompt_len or prompt_len + output_len > self.max_total_len
        return not (too_short or too_long)


VLLM_SHAREGPT_LIMITS = LengthLimits()


def load_dataset(path: Path, fmt: str = "auto") -> list[Conversation]:
    """Read `path` as ShareGPT JSON (`sharegpt`), JSONL (`jsonl`) or either (`auto`)."""
    data = _read(path)
    if fmt in ("auto", "sharegpt"):
        try:
            whole = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            if fmt == "sharegpt":
                raise SpecError(f"--dataset {path}: not a ShareGPT JSON file ({exc})") from None
            whole = None
        if _is_sharegpt(whole) or fmt == "sharegpt":
            return _sharegpt(path, whole)
    return _jsonl(path, data)


def _read(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_DATASET_BYTES:
            raise SpecError(f"--dataset {path}: {size / 2**20:,.0f} MiB is over the "
                            f"{MAX_DATASET_BYTES >> 30} GiB limit (read into memory); split "
                            "it or keep only the conversations you need")
        return path.read_bytes()
    except OSError as exc:
        raise SpecError(f"--dataset {path}: cannot read it ({exc.strerror or exc})") from None


def _check_size(size: int, where: str) -> None:
    """One conversation over the limit would be tokenized in one piece (minutes,
    gigabytes) only to be too long for any server's context."""
    if size > MAX_CONVERSATION_BYTES:
        raise SpecError(f"{where}: the conversation is over {MAX_CONVERSATION_BYTES >> 20} MiB "
                        "(about 1M tokens, more than any model's context); shorten or drop it")


def _is_sharegpt(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(entry, dict) and "conversations" in entry for entry in value[:100]
    )


def _sharegpt(path: Path, entries: Any) -> list[Conversation]:
    if not isinstance(entries, list):
        raise SpecError(f"--dataset {path}: ShareGPT is a JSON list of "
                        "{\"conversations\": [{\"from\", \"value\"}, ...]} entries")
    conversations = []
    for number, entry in enumerate(entries):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue  # as vLLM: a prompt needs its reference answer
        texts = [turn.get("value") if isinstance(turn, dict) else None for turn in turns[:2]]
        if not all(isinstance(text, str) for text in texts):
            raise SpecError(f"--dataset {path}: entry {number}: each turn needs a string "
                            "\"value\"")
        prompt, answer = texts
        _check_size(sum(len(text.encode()) for text in texts if text),
                    f"--dataset {path}: entry {number}")
        conversations.append(Conversation([{"role": "user", "content": prompt}], answer=answer))
    if not conversations:
        raise SpecError(f"--dataset {path}: no ShareGPT entry has two turns")
    return conversations


def _jsonl(path: Path, data: bytes) -> list[Conversation]:
    conversations = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        _check_size(len(line), f"--dataset {path}:{number}")
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise SpecError(f"--dataset {path}:{number}: not JSON ({exc}); expected ShareGPT "
                            "JSON or one messages list per line") from None
        conversations.append(_jsonl_item(item, f"--dataset {path}:{number}"))
    if not conversations:
        raise SpecError(f"--dataset {path}: no conversations in the file")
    return conversations


def _jsonl_item(item: Any, where: str) -> Conversation:
    if isinstance(item, dict) and "prompt" in item and "messages" not in item:
        prompt, output = item["prompt"], item.get("output_tokens")
        if not isinstance(prompt, str):
            raise SpecError(f"{where}: \"prompt\" must be a string")
        if output is not None and (not isinstance(output, int) or output < 1):
            raise SpecError(f"{where}: \"output_tokens\" must be a positive integer")
        return Conversation([{"role": "user", "content": prompt}], output_tokens=output)
    messages = item.get("messages") if isinstance(item, dict) else item
    if not isinstance(messages, list) or not messages or not all(
        isinstance(m, dict) and "role" in m for m in messages
    ):
        raise SpecError(f"{where}: expected a list of {{role, content}} messages, "
                        "{\"messages\": [...]} or {\"prompt\": ...}")
    return Conversation(messages)
