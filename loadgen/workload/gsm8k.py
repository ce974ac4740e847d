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

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec, SpecError
from loadgen.tokenizer import encode
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import Keep, PointPlan, RequestSpec
from loadgen.workload.reply import ReplyText

WHERE = (
    "GSM8K is the Hugging Face dataset openai/gsm8k (config main): save its test split "
    "as JSONL for --accuracy-data and its train split for --accuracy-shots"
)
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


def read_items(path: Path, flag: str) -> list[Item]:
    """GSM8K's JSONL; any problem is one SpecError line naming the file and where to get it."""
    if path.suffix == ".parquet":
        raise SpecError(
            f"{flag} {path}: parquet is not read here (no parquet library is a dependency); "
            "give the split as JSONL (one {question, answer} object per line)"
        )
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise SpecError(f"{flag} {path}: {exc.strerror or exc}; {WHERE}") from None
    items: list[Item] = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith(b"#"):  # a comment (test fixtures say what they are)
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise SpecError(f"{flag} {path}:{number}: not JSON; {WHERE}") from None
        if not (
            isinstance(value, dict)
            and isinstance(value.get("question"), str)
            and isinstance(value.get("answer"), str)
        ):
            raise SpecError(
                f"{flag} {path}:{number}: a GSM8K line has string `question` and `answer`; {WHERE}"
            )
        items.append(Item(len(items), value["question"], value["answer"]))
    if not items:
        raise SpecError(f"{flag} {path}: no questions in the file; {WHERE}")
    return items


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
