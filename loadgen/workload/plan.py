"""RunSpec -> the requests of one concurrency point, bodies serialized, seeded.

Points are built one at a time (the runner builds the next one when it needs it), so a
`--conc 4..512 --isl 8192` sweep never holds more than one point's prompts in memory.
Each point draws from its own seeded stream, so point 64 is the same whether or not the
sweep also ran point 32, and warmup prompts never share a prefix with measured ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from tokenizers import Tokenizer

from encoders.errors import EncodingError
from loadgen.config.spec import RunSpec, SpecError
from loadgen.tokenizer import encode
from loadgen.workload.bodies import BodyOptions, chat_body, completion_body, encode_body

MEASURED, WARMUP, PREFLIGHT = 0, 1, 2  # rng stream ids
SYNTH_BATCH = 256  # prompts synthesized at a time (bounds peak memory)
SEED_BITS = 31  # request seeds fit a signed 32-bit int (vLLM accepts any int)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request ready to send: the body bytes exist before the request's clock starts."""

    index: int  # send order within its point
    input_len: int  # prompt tokens by loadgen's tokenizer (template + BOS included)
    max_tokens: int
    body: bytes
    # Sessions: which session and turn this request is, the affinity headers it carries
    # (e.g. X-Session-ID) and, for trace replay, the prompt tokens hash_ids say are cached.
    session_id: str | None = None
    turn_index: int | None = None
    tree_id: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    theoretical_cached_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class PointPlan:
    conc: int
    warmup: tuple[RequestSpec, ...]
    measured: tuple[RequestSpec, ...]


def sample_lengths(rng: np.random.Generator, count: int, nominal: int, ratio: float) -> list[int]:
    """InferenceX's --random-range-ratio: uniform integers in [ratio * L, L] (1.0 = exactly L)."""
    low = max(1, int(nominal * ratio))
    if low >= nominal:
        return [nominal] * count
    return [int(v) for v in rng.integers(low, nominal + 1, size=count)]


def point_rng(spec: RunSpec, conc: int, stream: int) -> np.random.Generator:
    return np.random.default_rng([spec.seed, conc, stream])


def load_dataset(path: Path) -> list[list[dict[str, Any]]]:
    """One OpenAI `messages` list per line (or an object with a `messages` key)."""
    conversations: list[list[dict[str, Any]]] = []
    with open(path, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                item = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise SpecError(f"--dataset {path}:{number}: not JSON ({exc})") from None
            messages = item.get("messages") if isinstance(item, dict) else item
            if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and "role" in m for m in messages
            ):
                raise SpecError(
                    f"--dataset {path}:{number}: expected a list of {{role, content}} messages"
                )
            conversations.append(messages)
    if not conversations:
        raise SpecError(f"--dataset {path}: no conversations in the file")
    return conversations


class Workload:
    """Builds each point's requests from a RunSpec; holds the tokenizer and dataset once."""

    def __init__(self, spec: RunSpec, tokenizer: Tokenizer, options: BodyOptions) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.options = options
        self.dataset = load_dataset(spec.dataset) if spec.dataset is not None else None
        self._dataset_prompts: dict[int, tuple[str, int]] = {}

    def point(self, conc: int) -> PointPlan:
        spec = self.spec
        warmup = self.requests(conc * spec.warmup_per_conc, point_rng(spec, conc, WARMUP))
        measured = self.requests(conc * spec.prompts_per_conc, point_rng(spec, conc, MEASURED))
        return PointPlan(conc=conc, warmup=tuple(warmup), measured=tuple(measured))

    def requests(self, count: int, rng: np.random.Generator) -> list[RequestSpec]:
        try:
            return self._requests(count, rng)
        except (ValueError, EncodingError) as exc:  # synthesis refuses the settings
            raise SpecError(f"cannot build prompts for --isl {self.spec.isl} "
                            f"--encoder {self.spec.encoder}: {exc}") from None

    def _requests(self, count: int, rng: np.random.Generator) -> list[RequestSpec]:
        if count == 0:
            return []
        spec = self.spec
        osls = sample_lengths(rng, count, spec.osl, spec.range_ratio)
        seeds = [int(s) for s in rng.integers(0, 1 << SEED_BITS, size=count)]
        if self.dataset is not None:
            return self._from_dataset(osls, seeds, rng)
        isls = sample_lengths(rng, count, spec.isl, spec.range_ratio)
        return self._synthesized(isls, osls, seeds, rng)

    def _synthesized(
        self,
        isls: Sequence[int],
        osls: Sequence[int],
        seeds: Sequence[int],
        rng: np.random.Generator,
    ) -> list[RequestSpec]:
        from loadgen.workload.prompts import synthesize_prompts, word_pool  # the encoder helper's

        pool = word_pool(self.tokenizer)
        requests: list[RequestSpec] = []
        # In batches: a batch's prompt strings are dropped once they are bodies, so a
        # conc-512 x isl-8192 point holds its bodies plus one batch, not every text twice.
        for first in range(0, len(isls), SYNTH_BATCH):
            prompts = synthesize_prompts(
                isls[first : first + SYNTH_BATCH], encoder=self.spec.encoder,
                thinking_mode=self.spec.thinking, reasoning_effort=self.spec.reasoning_effort,
                tokenizer=self.tokenizer, rng=rng, pool=pool,
            )
            for index, prompt in enumerate(prompts, first):
                osl, seed = osls[index], seeds[index]
                if self.options.endpoint == "completions":
                    body = encode_body(completion_body(self.options, prompt.text, osl, seed))
                else:
                    messages = [{"role": "user", "content": prompt.content}]
                    body = encode_body(chat_body(self.options, messages, osl, seed))
                requests.append(RequestSpec(index, prompt.num_tokens, osl, body))
            del prompts
        return requests

    def _from_dataset(
        self, osls: Sequence[int], seeds: Sequence[int], rng: np.random.Generator
    ) -> list[RequestSpec]:
        assert self.dataset is not None
        order = rng.permutation(len(self.dataset))
        requests = []
        for index, (osl, seed) in enumerate(zip(osls, seeds, strict=True)):
            line = int(order[index % len(order)])
            messages = self.dataset[line]
            text, input_len = self._encoded(line)
            if self.options.endpoint == "completions":
                body = encode_body(completion_body(self.options, text, osl, seed))
            else:
                body = encode_body(chat_body(self.options, messages, osl, seed))
            requests.append(RequestSpec(index, input_len, osl, body))
        return requests

    def _encoded(self, line: int) -> tuple[str, int]:
        """(prompt text, tokens) of dataset line `line`, encoded once per run: a sweep
        reuses each conversation in many requests and points."""
        cached = self._dataset_prompts.get(line)
        if cached is None:
            from encoders import ENCODERS

            assert self.dataset is not None
            text = ENCODERS[self.spec.encoder].encode_messages(
                self.dataset[line], self.spec.thinking,
                reasoning_effort=self.spec.reasoning_effort,
            )
            cached = self._dataset_prompts[line] = (text, len(encode(self.tokenizer, text)))
        return cached

    def preflight_prompt(self) -> tuple[str, int]:
        """One prompt (text, loadgen's token count) for the server's /tokenize check."""
        try:
            return self._preflight_prompt()
        except (ValueError, EncodingError) as exc:
            raise SpecError(f"cannot build prompts for --isl {self.spec.isl} "
                            f"--encoder {self.spec.encoder}: {exc}") from None

    def _preflight_prompt(self) -> tuple[str, int]:
        rng = point_rng(self.spec, 0, PREFLIGHT)
        if self.dataset is not None:
            return self._encoded(0)
        from loadgen.workload.prompts import synthesize_prompts

        shortest = min(self.spec.isl, max(1, int(self.spec.isl * self.spec.range_ratio)))
        [prompt] = synthesize_prompts(  # the shortest allowed length: if it fits, all do
            [min(shortest, 256)], encoder=self.spec.encoder,
            thinking_mode=self.spec.thinking, reasoning_effort=self.spec.reasoning_effort,
            tokenizer=self.tokenizer, rng=rng,
        )
        return prompt.text, prompt.num_tokens


CountText = Callable[[str], int]


def text_counter(tokenizer: Tokenizer) -> CountText:
    """Last-resort token counting of streamed text (flagged approximate in results)."""
    return lambda text: len(encode(tokenizer, text))
