"""`--accuracy gsm8k`: the questions, their few-shot conversations and the requests of an
accuracy point.

The data is GSM8K as openai/gsm8k publishes it (config `main`): one JSON object per line
with `question` and `answer` (the reasoning, then `#### N`). --accuracy-data is the
split asked (test), --accuracy-shots the split the shots come from (train). Each
question's five shots are drawn as lm-eval draws them (shot_indices below)
and sent as earlier user/assistant turns (lm-eval's --apply_chat_template makes them
multi-turn), then the question; the whole conversation is rendered by the encoder
(/v1/completions) or sent as messages for the server's template (/v1/chat/completions).
Greedy, EOS honoured (no ignore_eos), stopping at the task's `until` strings.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from tokenizers import Tokenizer

from loadgen.config import limits
from loadgen.config.build_spec import memory_budget
from loadgen.config.dataset_format import check_item_size, read_regular, regular_file
from loadgen.config.spec import RunSpec, SpecError
from loadgen.tokenizer import encode
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import Keep, PointPlan, RequestSpec
from loadgen.workload.reply import ReplyText

WHERE = (
    "GSM8K is the Hugging Face dataset openai/gsm8k (config main): save its test split "
    "as JSONL for --accuracy-data and its train split for --accuracy-shots"
)
SAVE_SPLIT = "save GSM8K's split (Hugging Face openai/gsm8k, config main) as a JSONL file"
# InferenceX's utils/evals/gsm8k.yaml at 843c6254ff69b567f772f6a5fd97675af3d04431 (lm-eval's
# gsm8k.yaml at 4e7e0d47f33bc71070c1d38394bafbb52b117163 with the instruction added):
# doc_to_text, generation_kwargs.until, num_fewshot; lm-eval's default fewshot seed.
PROMPT = (
    "Question: {question}\nEnd your response with the answer on the last line, "
    "formatted as: #### [number]\nAnswer:"
)
STOP = ("</s>", "<|im_end|>")
FEWSHOT = 5
FEWSHOT_SEED = 1234
WARMUP_MAX_TOKENS = 1  # warmup requests open the connections; their answers are not scored


def prompt(question: str) -> str:
    """The user turn of one question (doc_to_text)."""
    return PROMPT.format(question=question)


def shot_indices(questions: int, pool: int, shots: int = FEWSHOT) -> list[list[int]]:
    """Which train items are each question's shots, as lm-eval draws them: one
    random.Random(1234) and, per test question in order, `sample(train, k)` (its default
    sampler; the shots come from another split, so none is removed). The same shots as
    lm-eval's when the questions are the split's, from its first line."""
    rnd = random.Random(FEWSHOT_SEED)
    return [rnd.sample(range(pool), shots) for _ in range(questions)]


@dataclass(frozen=True, slots=True)
class Item:
    """One GSM8K line: its 0-based line number is its id."""

    id: int
    question: str
    answer: str


@dataclass(frozen=True, slots=True)
class TaskFile:
    """One --accuracy file read, not yet parsed: its lines with their 1-based numbers
    (blank and comment lines left out), so its size is judged before any is parsed."""

    flag: str
    path: Path
    size: int
    lines: list[tuple[int, bytes]]

    def mean_line_bytes(self) -> float:
        return sum(len(line) for _, line in self.lines) / len(self.lines) if self.lines else 0.0


def read_task_file(path: Path, flag: str) -> TaskFile:
    """The file's lines, bounded as a --dataset is: a regular file (a device or FIFO is
    refused without opening it), at most MAX_DATASET_BYTES, each line at most
    MAX_CONVERSATION_BYTES; any problem is one SpecError line."""
    if path.suffix == ".parquet":
        raise SpecError(
            f"{flag} {path}: parquet is not read here (no parquet library is a dependency); "
            "give the split as JSONL (one {question, answer} object per line)"
        )
    status = regular_file(path, flag, SAVE_SPLIT)
    data = read_regular(
        path, flag, status, "give GSM8K's split itself (its test split is under 1 MB)"
    )
    lines = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip() or line.startswith(b"#"):  # a comment (test fixtures say what they are)
            continue
        check_item_size(len(line), f"{flag} {path}:{number}")
        lines.append((number, line))
    if not lines:
        raise SpecError(f"{flag} {path}: no questions in the file; {WHERE}")
    return TaskFile(flag, path, len(data), lines)


def items(read: TaskFile) -> list[Item]:
    """The file's GSM8K lines; a line that is not one is one SpecError line."""
    found: list[Item] = []
    for number, line in read.lines:
        where = f"{read.flag} {read.path}:{number}"
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise SpecError(f"{where}: not JSON; {WHERE}") from None
        if not (
            isinstance(value, dict)
            and isinstance(value.get("question"), str)
            and isinstance(value.get("answer"), str)
        ):
            raise SpecError(f"{where}: a GSM8K line has string `question` and `answer`; {WHERE}")
        found.append(Item(len(found), value["question"], value["answer"]))
    return found


# Parsed into Items, a file is held at ~3x its bytes for the whole run (measured: a
# 89 MB, 10^6-line file grew the peak RSS by 259 MB).
HELD_PER_FILE_BYTE = 3


def point_memory_bytes(questions: TaskFile, shots: TaskFile, spec: RunSpec) -> tuple[int, int]:
    """(an upper estimate of what an accuracy point holds, the prompt length it assumes):
    as limits.point_memory_bytes estimates any point, every question a request (and the
    warmup's), each a conversation of its line and FEWSHOT shot lines on average (a token
    is at least a byte of text, so the bytes bound the tokens), answers of up to
    --accuracy-max-tokens; plus both files, held for the run."""
    n = len(questions.lines)
    top = max(spec.scoring.accuracy_concs(spec.load.conc))
    requests = n + min(top, n)
    isl = math.ceil(questions.mean_line_bytes() + FEWSHOT * shots.mean_line_bytes())
    bodies = limits.point_memory_bytes(requests, isl, spec.scoring.accuracy_max_tokens)
    return bodies + HELD_PER_FILE_BYTE * (questions.size + shots.size), isl


def read_task(data: Path, shots: Path, spec: RunSpec) -> tuple[list[Item], list[Item]]:
    """--accuracy-data and --accuracy-shots, each bounded as a --dataset is, and the
    accuracy point they make within the per-point memory limit of any point, before a
    line of either is parsed (a 10^6-line file is refused, not built into 4 GB)."""
    asked, pool = read_task_file(data, "--accuracy-data"), read_task_file(shots, "--accuracy-shots")
    estimate, isl = point_memory_bytes(asked, pool, spec)
    budget = memory_budget()
    if estimate > budget:
        raise SpecError(
            f"--accuracy-data {data}: its {len(asked.lines):,} questions (5-shot prompts of "
            f"~{isl:,} bytes, answers of up to {spec.scoring.accuracy_max_tokens} tokens) "
            f"would hold ~{estimate / 2**30:,.1f} GiB in memory, over the limit of one point "
            f"(half this machine's memory: {budget / 2**30:,.1f} GiB); ask fewer questions "
            "(GSM8K's test split is 1,319) or lower --accuracy-max-tokens"
        )
    return items(asked), items(pool)


def conversation(question: Item, shots: Sequence[Item]) -> list[dict[str, Any]]:
    """The shots as earlier turns (prompt, then the dataset's whole answer), then the question."""
    messages: list[dict[str, Any]] = []
    for shot in shots:
        messages.append({"role": "user", "content": prompt(shot.question)})
        messages.append({"role": "assistant", "content": shot.answer})
    messages.append({"role": "user", "content": prompt(question.question)})
    return messages


@dataclass(frozen=True, slots=True)
class Asked:
    """A measured request's question and the reply its client collects."""

    item: Item
    reply: ReplyText


class AccuracyWorkload:
    """Builds an accuracy point's requests: every question once, in order."""

    def __init__(
        self,
        spec: RunSpec,
        tokenizer: Tokenizer,
        options: BodyOptions,
        questions: Sequence[Item],
        shots: Sequence[Item],
    ) -> None:
        if len(shots) < FEWSHOT:
            raise SpecError(
                f"--accuracy-shots: {len(shots)} item(s); {FEWSHOT} shots per question "
                f"need at least {FEWSHOT}; {WHERE}"
            )
        self.spec = spec
        self.tokenizer = tokenizer
        self.options = options
        self.questions = tuple(questions)
        draws = shot_indices(len(self.questions), len(shots))
        self.conversations = [
            conversation(q, [shots[i] for i in draw])
            for q, draw in zip(self.questions, draws, strict=True)
        ]
        self.asked: dict[int, list[Asked]] = {}  # conc -> its measured requests' replies

    def with_options(self, options: BodyOptions) -> AccuracyWorkload:
        self.options = options
        return self

    def point(self, conc: int, keep: Keep | None = None) -> PointPlan:
        """Every question once (the measured requests); one short request per slot first
        (the warmup: the connections opened, nothing scored)."""
        warmup = [
            self._request(index, index, WARMUP_MAX_TOKENS)[0]
            for index in range(min(conc, len(self.questions)))
        ]
        measured: list[RequestSpec] = []
        asked: list[Asked] = []
        for index in range(len(self.questions)):
            request, reply = self._request(index, index, self.spec.scoring.accuracy_max_tokens)
            measured.append(request)
            asked.append(Asked(self.questions[index], reply))
        self.asked[conc] = asked
        return PointPlan(conc=conc, warmup=tuple(warmup), measured=tuple(measured))

    def _request(self, index: int, line: int, max_tokens: int) -> tuple[RequestSpec, ReplyText]:
        spec = self.spec
        messages = self.conversations[line]
        from encoders import ENCODERS

        # rendered by the encoder for both endpoints, as a dataset prompt is: the text
        # /v1/completions sends, and the prompt length the point reports
        text = ENCODERS[spec.workload.encoder].encode_messages(
            messages, spec.workload.thinking, reasoning_effort=spec.workload.reasoning_effort
        )
        input_len = len(encode(self.tokenizer, text))
        built = orjson.loads(
            self.options.builder.body(
                self.options, text=text, messages=messages, max_tokens=max_tokens, seed=1234
            )
        )
        # The task's generation settings over the run's: greedy, EOS honoured, its stops.
        built.update(temperature=0.0, ignore_eos=False, stop=list(STOP))
        built.pop("top_p", None)
        reply = ReplyText()
        body = orjson.dumps(built)
        return RequestSpec(index, input_len, max_tokens, body, reply=reply), reply


def reply_content(reply: ReplyText, spec: RunSpec, options: BodyOptions) -> str:
    """The answer text scored: the content, reasoning apart (chat: the server's split;
    completions: the encoder's parse of the raw text)."""
    message = options.builder.history_message(reply, spec.workload.encoder, spec.workload.thinking)
    content = message.get("content")
    return content if isinstance(content, str) else ""


def no_answer(reply: ReplyText, spec: RunSpec, options: BodyOptions) -> bool:
    """The reply has text but no answer section to score: all of it reasoning (in
    DeepSeek-V4's thinking mode, a completion that never wrote `</think>`; on chat, a
    server that streamed it all as `reasoning`). An empty reply (a failed request) is not
    one: it has nothing at all."""
    return not reply.empty and not reply_content(reply, spec, options).strip()
