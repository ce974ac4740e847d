"""Dataset files -> session trees: format detection and the trace and conversation readers.

Formats (`--dataset-format`, detected when `auto`):
- `weka`: the AgentX/Weka agentic trace schema, one JSON object per trace: `id`,
  `block_size`, `requests[]` of `{t, type: n|s, in, out, hash_ids, think_time, api_time}`
  and `{type: subagent, requests: [...]}` entries. A file holds one trace per line; a
  directory holds one trace per `.json` file. Subagents spawn from the parent request
  before them (one with none before it is dropped, as AIPerf does) and the parent's next
  request waits for them.
- `mooncake`: JSONL of `{timestamp (ms), input_length, output_length, hash_ids}`, one
  request each, replayed at its timestamp; hash ids are global to the file.
- `sharegpt`: `{"conversations": [{"from": human|gpt|system, "value": ...}]}` per line
  (or a JSON array of them): with --multi-turn, one session per conversation.
- `jsonl`: one OpenAI messages list per line (or `{"messages": [...]}`, or vLLM custom
  `{"prompt": ...}`, a one-turn conversation).
Files are read and formats detected by config/dataset_format.py, as for single prompts.

Gaps: a request's gap is the recorded idle time between the previous request's end and
its start (`t - (t_prev + api_time_prev)`), else its `think_time`, else 0; a session's
first request waits its `think_time` after the spawn.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from loadgen.config.dataset_format import detect_format
from loadgen.config.dataset_format import items as _items
from loadgen.config.spec import TRACE_FORMATS, SpecError
from loadgen.workload.sessions import Session, SessionTree, Turn

MOONCAKE_BLOCK_SIZE = 512
WEKA_BLOCK_SIZE = 64
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "system": "system",
}


# Bounds checked before anything is built from a trace (a prompt of `in` tokens, a block
# pattern of `block_size` positions, a wait until `timestamp`): far above any real trace,
# far below what would exhaust memory or hang a point.
MAX_TRACE_TOKENS = 1 << 22  # 4,194,304 per request: 4x the longest context served today
MAX_BLOCK_SIZE = 1 << 16  # 65,536 tokens per hash id (vLLM's blocks are 16..256)
MAX_TRACE_SPAN_MS = 7 * 24 * 3600 * 1000  # a Mooncake trace covering more than a week
MAX_HASH_ID = (1 << 64) - 1  # hash ids are mixed as unsigned 64-bit keys


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def _int(
    entry: dict[str, Any], key: str, where: str, minimum: int = 0, maximum: int = MAX_TRACE_TOKENS
) -> int:
    value = entry.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise SpecError(
            f"--dataset {where}: `{key}` must be an integer >= {minimum} and at "
            f"most {maximum:,}, got {_shown(value)}"
        )
    return value


def _hash_ids(entry: dict[str, Any], where: str) -> tuple[int, ...]:
    ids = entry.get("hash_ids") or []
    if not isinstance(ids, list) or not all(isinstance(h, int) for h in ids):
        raise SpecError(f"--dataset {where}: `hash_ids` must be a list of integers")
    if len(ids) > MAX_TRACE_TOKENS or not all(0 <= h <= MAX_HASH_ID for h in ids):
        raise SpecError(
            f"--dataset {where}: `hash_ids` must hold at most "
            f"{MAX_TRACE_TOKENS:,} integers in 0..2**64-1"
        )
    return tuple(ids)


def _float(entry: dict[str, Any], key: str) -> float | None:
    value = entry.get(key)
    return float(value) if isinstance(value, int | float) and value >= 0 else None


def load_weka(path: Path) -> list[SessionTree]:
    trees = []
    for where, item in _items(path):
        if not isinstance(item, dict) or not isinstance(item.get("requests"), list):
            raise SpecError(f"--dataset {where}: a Weka trace is an object with `requests`")
        trace_id = str(item.get("id", where))
        block_size = _int(
            {"block_size": WEKA_BLOCK_SIZE, **item}, "block_size", where, 1, MAX_BLOCK_SIZE
        )
        root = _weka_session("", item["requests"], where)
        if root.turns:
            namespace = zlib.crc32(trace_id.encode())
            trees.append(SessionTree(trace_id, root, "trace", namespace, None, block_size))
    if not trees:
        raise SpecError(f"--dataset {path}: no trace has a request")
    return trees


def _weka_session(name: str, requests: list[Any], where: str) -> Session:
    """One session's turns; subagent entries attach to the request before them."""
    turns: list[Turn] = []
    spawned: list[list[Session]] = []
    previous: dict[str, Any] | None = None
    for number, entry in enumerate(requests):
        at = f"{where} request {number}"
        if not isinstance(entry, dict):
            raise SpecError(f"--dataset {at}: each request must be an object")
        if entry.get("type") == "subagent":
            if not turns or not isinstance(entry.get("requests"), list):
                continue  # nothing spawns it (AIPerf drops these too) or nothing inside
            child_name = f"{name}.sa{sum(map(len, spawned))}".lstrip(".")
            spawned[-1].append(_weka_session(child_name, entry["requests"], at))
            continue
        turn = Turn(
            max_tokens=_int(entry, "out", at, 1),
            gap_s=_gap(entry, previous),
            input_len=_int(entry, "in", at, 1),
            hash_ids=_hash_ids(entry, at),
        )
        turns.append(turn)
        spawned.append([])
        previous = entry
    final = tuple(
        Turn(
            t.max_tokens, t.gap_s, t.input_len, t.hash_ids, 0, tuple(s for s in children if s.turns)
        )
        for t, children in zip(turns, spawned, strict=True)
    )
    return Session(name, final)


def _gap(entry: dict[str, Any], previous: dict[str, Any] | None) -> float:
    think = _float(entry, "think_time")
    if previous is None:
        return think or 0.0
    t, t_prev, api = _float(entry, "t"), _float(previous, "t"), _float(previous, "api_time")
    if t is not None and t_prev is not None and api is not None:
        return max(0.0, t - t_prev - api)
    return think or 0.0


def load_mooncake(path: Path) -> list[SessionTree]:
    trees: list[SessionTree] = []
    first: float | None = None
    for where, item in _items(path):
        if not isinstance(item, dict):
            raise SpecError(f"--dataset {where}: a Mooncake record is a JSON object")
        stamp = _timestamp(item, where, first, trees[-1].start_at_s if trees else None)
        first = stamp if first is None else first
        turn = Turn(
            max_tokens=_int(item, "output_length", where, 1),
            gap_s=0.0,
            input_len=_int(item, "input_length", where, 1),
            hash_ids=_hash_ids(item, where),
        )
        trees.append(
            SessionTree(
                f"r{len(trees):06d}",
                Session("", (turn,)),
                "trace",
                0,
                (stamp - first) / 1000.0,
                MOONCAKE_BLOCK_SIZE,
            )
        )
    if not trees:
        raise SpecError(f"--dataset {path}: no records in the file")
    return sorted(trees, key=lambda tree: tree.start_at_s or 0.0)


def _timestamp(
    item: dict[str, Any], where: str, first: float | None, previous_s: float | None
) -> float:
    """A record's `timestamp` (ms): non-negative, never before the record above it, and
    within MAX_TRACE_SPAN_MS of the first (the replay waits until each one)."""
    stamp = item.get("timestamp", 0)
    if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not stamp >= 0:
        raise SpecError(
            f"--dataset {where}: `timestamp` must be a number of ms >= 0, got {_shown(stamp)}"
        )
    if first is not None and stamp - first > MAX_TRACE_SPAN_MS:
        raise SpecError(
            f"--dataset {where}: `timestamp` {_shown(stamp)} is "
            f"{(stamp - first) / 86_400_000:,.1f} days after the first record's; "
            "a replay spans at most 7 days"
        )
    if previous_s is not None and first is not None and stamp - first < previous_s * 1000:
        raise SpecError(
            f"--dataset {where}: `timestamp` {_shown(stamp)} is before the "
            f"record above it ({first + previous_s * 1000:g}); records are in "
            "time order"
        )
    return float(stamp) if isinstance(stamp, float) else stamp


def load_conversations(path: Path, fmt: str) -> list[list[dict[str, Any]]]:
    """ShareGPT, OpenAI-messages or custom-prompt conversations as OpenAI message lists."""
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt in TRACE_FORMATS:
        raise SpecError(f"--dataset {path}: a {fmt} trace replays on its own; drop --multi-turn")
    conversations: list[list[dict[str, Any]]] = []
    for where, item in _items(path):
        messages: Any
        if fmt == "sharegpt":
            turns = item.get("conversations") if isinstance(item, dict) else None
            if not isinstance(turns, list):
                raise SpecError(f"--dataset {where}: ShareGPT items have `conversations`")
            messages = [
                {
                    "role": SHAREGPT_ROLES.get(str(t.get("from")), "user"),
                    "content": str(t.get("value", "")),
                }
                for t in turns
                if isinstance(t, dict)
            ]
        elif isinstance(item, dict) and "prompt" in item and "messages" not in item:
            if not isinstance(item["prompt"], str):
                raise SpecError(f'--dataset {where}: "prompt" must be a string')
            messages = [{"role": "user", "content": item["prompt"]}]
        else:
            messages = item.get("messages") if isinstance(item, dict) else item
            if not isinstance(messages, list) or not all(
                isinstance(m, dict) and "role" in m for m in messages
            ):
                raise SpecError(f"--dataset {where}: expected a list of {{role, content}} messages")
        if messages:
            conversations.append(messages)
    if not conversations:
        raise SpecError(f"--dataset {path}: no conversations in the file")
    return conversations
