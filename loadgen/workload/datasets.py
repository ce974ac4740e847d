"""Dataset files -> conversations to send (prompt messages, and the output length they ask for).

Single-turn formats, told apart by content (config/dataset_format.py, which also reads
the file) unless the user names one (`--dataset-format`, or vLLM's `--dataset-name`):
- ShareGPT, as vLLM `bench serve --dataset-name sharegpt` reads it: a JSON list (or one
  entry per line) of entries whose `conversations` is a list of {from, value}; entries
  with fewer than two turns are skipped; the first turn is the prompt (one user message),
  the second the reference answer, whose token count is the output length when --osl is
  not given.
- JSONL, one item per line: an OpenAI `messages` list, an object with `messages`, or
  vLLM's custom dataset object {prompt, output_tokens?}.
- SPEED-Bench (NVIDIA's speculative-decoding set), as vLLM 0.32's `SpeedBench` reads it: a
  directory holding `<subset>.jsonl`, rows of {messages, category}; a row's prompt is its
  first message's content, sent as one user message; `--speed-bench-category` keeps the
  rows of one category (an exact match, as vLLM).
Traces (weka, mooncake) and --multi-turn conversations are sessions: workload/traces.py.
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

from loadgen.config.dataset_format import item_format, items
from loadgen.config.spec import TRACE_FORMATS, SpecError, SpeedBenchOptions


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
    """Read `path` as ShareGPT (`sharegpt`), JSONL (`jsonl`) or either (`auto`)."""
    if path.is_dir():  # a directory is Weka traces: refused below without reading them
        fmt = "weka"
    entries = [] if fmt in TRACE_FORMATS or path.is_dir() else list(items(path))
    if fmt == "auto" and entries:  # told by the first item of the one read
        fmt = item_format(*entries[0])
    if fmt in TRACE_FORMATS:
        raise SpecError(
            f"--dataset {path}: a {fmt} trace is replayed as sessions, not read as single prompts"
        )
    if fmt == "sharegpt":
        return _sharegpt(path, entries)
    conversations = [_jsonl_item(item, f"--dataset {where}") for where, item in entries]
    if not conversations:
        raise SpecError(f"--dataset {path}: no conversations in the file")
    return conversations


def load_speed_bench(directory: Path, options: SpeedBenchOptions) -> list[Conversation]:
    """The rows of `directory/<subset>.jsonl` in `options.category` (all without one)."""
    if not directory.is_dir():
        raise SpecError(
            f"--dataset-path {directory}: SPEED-Bench is a directory of "
            "<subset>.jsonl files (NVIDIA-NeMo Skills' speed-bench prepare.py "
            "writes it)"
        )
    path = directory / f"{options.subset}.jsonl"
    if not path.exists():
        raise SpecError(f"--speed-bench-dataset-subset {options.subset}: no {path}")
    conversations, categories = [], set()
    for where, row in items(path):  # the bounded reader: no device, FIFO or huge file
        messages = row.get("messages") if isinstance(row, dict) else None
        first = messages[0] if isinstance(messages, list) and messages else None
        content = first.get("content") if isinstance(first, dict) else None
        if not isinstance(content, str):
            raise SpecError(
                f'--dataset {where}: a SPEED-Bench row needs "messages" whose '
                'first item has a string "content"'
            )
        category = row.get("category")
        categories.add(str(category))
        if options.category is None or category == options.category:
            conversations.append(Conversation([{"role": "user", "content": content}]))
    if not conversations:
        raise SpecError(
            f"--speed-bench-category {options.category}: no row of {path} has it; "
            f"its categories: {', '.join(sorted(categories)) or '(none)'}"
        )
    return conversations


def _sharegpt(path: Path, entries: list[tuple[str, Any]]) -> list[Conversation]:
    conversations = []
    for where, entry in entries:
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue  # as vLLM: a prompt needs its reference answer
        texts = [turn.get("value") if isinstance(turn, dict) else None for turn in turns[:2]]
        if not all(isinstance(text, str) for text in texts):
            raise SpecError(f'--dataset {where}: each turn needs a string "value"')
        prompt, answer = texts
        conversations.append(Conversation([{"role": "user", "content": prompt}], answer=answer))
    if not conversations:
        raise SpecError(
            f"--dataset {path}: no ShareGPT entry has two turns (ShareGPT is a "
            'JSON list of {"conversations": [{"from", "value"}, ...]})'
        )
    return conversations


def _jsonl_item(item: Any, where: str) -> Conversation:
    if isinstance(item, dict) and "prompt" in item and "messages" not in item:
        prompt, output = item["prompt"], item.get("output_tokens")
        if not isinstance(prompt, str):
            raise SpecError(f'{where}: "prompt" must be a string')
        if output is not None and (not isinstance(output, int) or output < 1):
            raise SpecError(f'{where}: "output_tokens" must be a positive integer')
        return Conversation([{"role": "user", "content": prompt}], output_tokens=output)
    messages = item.get("messages") if isinstance(item, dict) else item
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) and "role" in m for m in messages)
    ):
        raise SpecError(
            f"{where}: expected a list of {{role, content}} messages, "
            '{"messages": [...]} or {"prompt": ...}'
        )
    return Conversation(messages)
