"""RunSpec -> the requests of one concurrency point, bodies serialized, seeded.

Points are built one at a time (the runner builds the next one when it needs it), so a
`--conc 4..512 --isl 8192` sweep never holds more than one point's prompts in memory.
Each point draws from its own seeded stream, so point 64 is the same whether or not the
sweep also ran point 32, and warmup prompts never share a prefix with measured ones.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from encoders.errors import EncodingError
from loadgen.config.spec import RunSpec, SpecError
from loadgen.tokenizer import encode
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.datasets import (
    VLLM_SHAREGPT_LIMITS,
    Conversation,
    load_dataset,
    load_speed_bench,
)
from loadgen.workload.reply import ReplyText

MEASURED, WARMUP, PREFLIGHT = 0, 1, 2  # rng stream ids
SYNTH_BATCH = 256  # prompts synthesized at a time (bounds peak memory)
SEED_BITS = 31  # request seeds fit a signed 32-bit int (vLLM accepts any int)
Keep = Callable[[int], bool]  # request index -> build it (one process's share of a point)


def _all(_index: int) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request ready to send: the body bytes exist before the request's clock starts."""

    index: int  # send order within its point
    input_len: int  # prompt tokens by loadgen's tokenizer (template + BOS included)
    max_tokens: int
    body: bytes
    target_len: int | None = None  # the synthetic length asked for (None: dataset prompt)
    # Sessions: which session and turn this request is, the affinity headers it carries
    # (e.g. X-Session-ID) and, for trace replay, the prompt tokens hash_ids say are cached.
    session_id: str | None = None
    turn_index: int | None = None
    tree_id: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    theoretical_cached_tokens: int | None = None
    # --live-history: the client collects the reply's text here for the session's next
    # turns (None, the default: nothing is collected)
    reply: ReplyText | None = None


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


def synthesis_of(spec: RunSpec, tokenizer: Tokenizer) -> tuple[str, str | None]:
    """(method, why) the run's prompts are built with: `words` (exact by construction),
    `fitted` (re-tokenized until exact where possible; why not words) or `dataset`."""
    if spec.workload.dataset is not None:
        return "dataset", None
    from loadgen.workload.prompts import synthesis

    try:
        how = synthesis(
            encoder=spec.workload.encoder,
            thinking_mode=spec.workload.thinking,
            reasoning_effort=spec.workload.reasoning_effort,
            tokenizer=tokenizer,
        )
    except (ValueError, EncodingError) as exc:
        raise SpecError(
            f"cannot build prompts for --encoder {spec.workload.encoder}: {exc}"
        ) from None
    return how.method, how.reason


class Workload:
    """Builds each point's requests from a RunSpec; holds the tokenizer and dataset once."""

    def __init__(self, spec: RunSpec, tokenizer: Tokenizer, options: BodyOptions) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        self.options = options
        self.dataset: list[Conversation] | None = None
        self._dataset_prompts: dict[int, tuple[str, int]] = {}
        self._answer_tokens: dict[int, int] = {}
        if spec.workload.dataset is not None:
            self.dataset = (
                load_speed_bench(spec.workload.dataset, spec.workload.speed_bench)
                if spec.workload.speed_bench is not None
                else load_dataset(spec.workload.dataset, spec.workload.dataset_format)
            )
            if spec.workload.osl is None and any(
                c.answer is None and c.output_tokens is None for c in self.dataset
            ):
                raise SpecError(
                    f"--osl is required with --dataset {spec.workload.dataset}: its items "
                    "carry no output length (only ShareGPT answers and "
                    "output_tokens do)"
                )

    def with_options(self, options: BodyOptions) -> Workload:
        """This workload under other body options (the server's, after preflight): the
        dataset, read and encoded once, and its prompt caches are shared, not rebuilt."""
        other = copy.copy(self)
        other.options = options
        return other

    def reseeded(self, seed: int) -> Workload:
        """The same workload drawn with another seed (a --trials trial): the dataset and
        its encoded prompts (cached by line, not by seed) are shared, not read again."""
        other = copy.copy(self)
        other.spec = self.spec.with_(seed=seed)
        return other

    def point(self, conc: int, keep: Keep | None = None) -> PointPlan:
        """The point's requests; with `keep`, only those whose index it accepts (one
        process's share: the others are drawn, so the kept ones are the same, not built)."""
        spec = self.spec
        warmup = self.requests(spec.load.warmup_requests(conc), point_rng(spec, conc, WARMUP), keep)
        measured = self.requests(
            spec.load.measured_requests(conc), point_rng(spec, conc, MEASURED), keep
        )
        return PointPlan(conc=conc, warmup=tuple(warmup), measured=tuple(measured))

    def requests(
        self, count: int, rng: np.random.Generator, keep: Keep | None = None
    ) -> list[RequestSpec]:
        try:
            return self._requests(count, rng, keep or _all)
        except (ValueError, EncodingError) as exc:  # synthesis refuses the settings
            raise SpecError(f"cannot build prompts for {self._described()}: {exc}") from None

    def _described(self) -> str:
        if self.spec.workload.dataset is not None:
            return f"--dataset {self.spec.workload.dataset} --encoder {self.spec.workload.encoder}"
        return f"--isl {self.spec.workload.isl} --encoder {self.spec.workload.encoder}"

    def _requests(self, count: int, rng: np.random.Generator, keep: Keep) -> list[RequestSpec]:
        if count == 0:
            return []
        spec = self.spec
        osls = (
            None
            if spec.workload.osl is None
            else sample_lengths(rng, count, spec.workload.osl, spec.workload.range_ratio)
        )
        seeds = [int(s) for s in rng.integers(0, 1 << SEED_BITS, size=count)]
        if self.dataset is not None:
            return self._from_dataset(osls, seeds, rng, keep)
        assert (
            osls is not None and spec.workload.isl is not None
        )  # RunSpec: None only with a dataset
        isls = sample_lengths(rng, count, spec.workload.isl, spec.workload.range_ratio)
        return self._synthesized(isls, osls, seeds, rng, keep)

    def _synthesized(
        self,
        isls: Sequence[int],
        osls: Sequence[int],
        seeds: Sequence[int],
        rng: np.random.Generator,
        keep: Keep,
    ) -> list[RequestSpec]:
        from loadgen.workload.prompts import synthesize_prompts

        requests: list[RequestSpec] = []
        builder = self.options.builder
        # In batches: a batch's prompt strings are dropped once they are bodies, so a
        # conc-512 x isl-8192 point holds its bodies plus one batch, not every text twice.
        for first in range(0, len(isls), SYNTH_BATCH):
            prompts = synthesize_prompts(
                isls[first : first + SYNTH_BATCH],
                encoder=self.spec.workload.encoder,
                thinking_mode=self.spec.workload.thinking,
                reasoning_effort=self.spec.workload.reasoning_effort,
                tokenizer=self.tokenizer,
                rng=rng,
            )
            for index, prompt in enumerate(prompts, first):
                if not keep(index):
                    continue
                osl, seed = osls[index], seeds[index]
                body = builder.body(
                    self.options,
                    text=prompt.text,
                    messages=[{"role": "user", "content": prompt.content}],
                    max_tokens=osl,
                    seed=seed,
                )
                requests.append(
                    RequestSpec(index, prompt.num_tokens, osl, body, target_len=prompt.target)
                )
            del prompts
        return requests

    def _from_dataset(
        self,
        osls: Sequence[int] | None,
        seeds: Sequence[int],
        rng: np.random.Generator,
        keep: Keep,
    ) -> list[RequestSpec]:
        assert self.dataset is not None
        order = self._usable(rng.permutation(len(self.dataset)), len(seeds))
        requests = []
        builder = self.options.builder
        for index, seed in enumerate(seeds):
            if not keep(index):
                continue
            line = int(order[index % len(order)])
            messages = self.dataset[line].messages
            text, input_len = self._encoded(line)
            osl = self._output_len(line) if osls is None else osls[index]
            body = builder.body(
                self.options, text=text, messages=messages, max_tokens=osl, seed=seed
            )
            requests.append(RequestSpec(index, input_len, osl, body))
        return requests

    def _encoded(self, line: int) -> tuple[str, int]:
        """(prompt text, tokens) of dataset line `line`, encoded once per run: a sweep
        reuses each conversation in many requests and points."""
        cached = self._dataset_prompts.get(line)
        if cached is None:
            from encoders import ENCODERS

            assert self.dataset is not None
            text = ENCODERS[self.spec.workload.encoder].encode_messages(
                self.dataset[line].messages,
                self.spec.workload.thinking,
                reasoning_effort=self.spec.workload.reasoning_effort,
            )
            cached = self._dataset_prompts[line] = (text, len(encode(self.tokenizer, text)))
        return cached

    def _output_len(self, line: int) -> int:
        """The item's own output length: ShareGPT answer tokens or `output_tokens`."""
        assert self.dataset is not None
        item = self.dataset[line]
        if item.output_tokens is not None:
            return item.output_tokens
        cached = self._answer_tokens.get(line)
        if cached is None:
            assert item.answer is not None  # checked when the dataset was loaded
            cached = self._answer_tokens[line] = max(1, len(encode(self.tokenizer, item.answer)))
        return cached

    def _keeps(self, line: int) -> bool:
        """vLLM's ShareGPT length pruning, with `--dataset-name sharegpt` only."""
        if not self.spec.workload.sharegpt_limits:
            return True
        output = (
            self.spec.workload.osl if self.spec.workload.osl is not None else self._output_len(line)
        )
        return VLLM_SHAREGPT_LIMITS.keeps(
            self._encoded(line)[1], output, output_given=self.spec.workload.osl is not None
        )

    def _usable(self, order: np.ndarray[tuple[int], np.dtype[np.int64]], count: int) -> list[int]:
        """The first `count` lines of `order` that are kept (all of them when fewer: the
        requests then cycle through them, as vLLM oversamples)."""
        kept: list[int] = []
        for line in (int(i) for i in order):
            if len(kept) == count:
                break
            if self._keeps(line):
                kept.append(line)
        if not kept:
            raise self._nothing_usable()
        return kept

    def _nothing_usable(self) -> SpecError:
        limits = VLLM_SHAREGPT_LIMITS
        return SpecError(
            f"--dataset {self.spec.workload.dataset}: no conversation is within vLLM's "
            f"ShareGPT bounds (prompt {limits.min_len}..{limits.max_prompt_len} "
            f"tokens, prompt + output <= {limits.max_total_len})"
        )

    def longest_request(self) -> tuple[int, int]:
        """(input, output) tokens of the longest request the run can send: what the
        server's max_model_len must hold. Encodes every usable dataset item once."""
        spec = self.spec
        if self.dataset is None:
            assert spec.workload.isl is not None and spec.workload.osl is not None
            return spec.workload.isl, spec.workload.osl
        lines = [line for line in range(len(self.dataset)) if self._keeps(line)]
        if not lines:
            raise self._nothing_usable()
        return max(
            (
                (self._encoded(line)[1], spec.workload.osl or self._output_len(line))
                for line in lines
            ),
            key=sum,
        )

    def preflight_prompt(self) -> tuple[str, int]:
        """One prompt (text, loadgen's token count) for the server's /tokenize check."""
        try:
            return self._preflight_prompt()
        except (ValueError, EncodingError) as exc:
            raise SpecError(f"cannot build prompts for {self._described()}: {exc}") from None

    def _preflight_prompt(self) -> tuple[str, int]:
        rng = point_rng(self.spec, 0, PREFLIGHT)
        if self.dataset is not None:
            return self._encoded(0)
        from loadgen.workload.prompts import synthesize_prompts

        assert self.spec.workload.isl is not None  # RunSpec: None only with a dataset
        shortest = min(
            self.spec.workload.isl,
            max(1, int(self.spec.workload.isl * self.spec.workload.range_ratio)),
        )
        [prompt] = synthesize_prompts(  # the shortest allowed length: if it fits, all do
            [min(shortest, 256)],
            encoder=self.spec.workload.encoder,
            thinking_mode=self.spec.workload.thinking,
            reasoning_effort=self.spec.workload.reasoning_effort,
            tokenizer=self.tokenizer,
            rng=rng,
        )
        return prompt.text, prompt.num_tokens


CountText = Callable[[str], int]


def text_counter(tokenizer: Tokenizer) -> CountText:
    """Last-resort token counting of streamed text (flagged approximate in results)."""
    return lambda text: len(encode(tokenizer, text))
