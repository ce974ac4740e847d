"""`--accuracy gsm8k`: after the sweep, an accuracy point per --accuracy-conc.

Each is a point like any other (warmed up, streamed, timed: conc_<N>.json with TTFT,
ITL, throughput and AL) in the run's `accuracy_gsm8k/` directory, whose requests are the
GSM8K questions (workload/gsm8k.py); once the point has ended its replies are scored
(metrics/gsm8k.py) into gsm8k_conc_<N>.json and gsm8k_samples_conc_<N>.jsonl beside it.
The data files are read before the sweep starts, so a missing one costs no measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.config.spec import RunSpec, SpecError
from loadgen.metrics import gsm8k
from loadgen.results.accuracy import AccuracyResult, AccuracySample, ExactMatchFigure
from loadgen.results.outcome import PointOutcome
from loadgen.results.point import PointResult, ResultFileError
from loadgen.results.store import ResultsDir
from loadgen.run.driver import Driver, Lives, RunPieces
from loadgen.run.extension import Extension, Measured
from loadgen.run.features import Features
from loadgen.run.lifecycle import PointLife
from loadgen.run.point import Point
from loadgen.run.point_records import PointRecords, RunContext
from loadgen.run.sweep import SweepOptions, SweepOutcome, sweep_points
from loadgen.sinks.run_files import RunFiles
from loadgen.workload.gsm8k import AccuracyWorkload, Item, no_answer, read_task, reply_content

PROTOCOL = (
    "5-shot chat (shots as turns, lm-eval's seed 1234), greedy, until </s> <|im_end|>; "
    "InferenceX utils/evals/gsm8k.yaml, lm-eval exact_match"
)


@dataclass(frozen=True, slots=True)
class AccuracyData:
    questions: list[Item]
    shots: list[Item]


def read_data(spec: RunSpec) -> AccuracyData | None:
    """The --accuracy files, read (and refused, one line) before anything runs."""
    scoring = spec.scoring
    if scoring.accuracy is None:
        return None
    assert scoring.accuracy_data is not None and scoring.accuracy_shots is not None
    if spec.sessions or spec.load.open_loop or spec.load.conc_stages or spec.load.find_max:
        raise SpecError(
            "--accuracy: its points are closed loop at --accuracy-conc; run it with a "
            "closed-loop sweep (no sessions, --request-rate, ramps, stages or --find-max)"
        )
    if spec.processes.shard_count > 1:
        raise SpecError(
            "--accuracy with --shard: every shard would ask every question; run the "
            "accuracy points from one loadgen"
        )
    return AccuracyData(*read_task(scoring.accuracy_data, scoring.accuracy_shots, spec))


def accuracy_done(spec: RunSpec, results_dir: Path) -> bool:
    """Every accuracy point of `spec` is scored whole in `results_dir` (a --resume of a
    complete sweep then has nothing left to run)."""
    task = spec.scoring.accuracy
    assert task is not None
    store = ResultsDir(ResultsDir(results_dir).accuracy_dir(task))
    for conc in spec.scoring.accuracy_concs(spec.load.conc):
        try:
            if not store.read_accuracy(task, conc).complete:
                return False
        except ResultFileError:
            return False
    return True


@dataclass(frozen=True, slots=True)
class AccuracyOutcome:
    results_dir: Path
    points: tuple[AccuracyResult, ...]
    sweep: SweepOutcome
    # conc -> replies that had text but no answer section (workload/gsm8k.py no_answer)
    unanswered: Mapping[int, int] = field(default_factory=dict)
    thinking: str = "thinking"  # the run's --thinking, which the advice below depends on

    def below(self) -> list[AccuracyResult]:
        return [p for p in self.points if p.passed is False]

    @property
    def exit_code(self) -> int:
        if self.sweep.exit_code:
            return self.sweep.exit_code
        return 1 if self.below() else 0

    def lines(self) -> list[str]:
        """What the run says of its accuracy points: a line each, then the gate's line."""
        said = []
        for point in self.points:
            strict, flexible = point.strict_match, point.flexible_extract
            said.append(
                f"{point.task} conc {point.conc}: strict-match "
                f"{strict.exact_match:.4f} +/- {strict.stderr or 0:.4f}, flexible-extract "
                f"{flexible.exact_match:.4f} +/- {flexible.stderr or 0:.4f} (n={point.n}) "
                f"in {self.results_dir}"
            )
            said.extend(self._why_unanswered(point))
        gate = self.gate_line()
        return said if gate is None else [*said, gate]

    def _why_unanswered(self, point: AccuracyResult) -> list[str]:
        """A score of (nearly) 0 with no word why: said when most replies had no answer
        section, with what to do."""
        missing = self.unanswered.get(point.conc, 0)
        if not point.n or 2 * missing <= point.n:
            return []
        head = f"{point.task} conc {point.conc}: {missing} of {point.n} replies have no answer"
        if self.thinking == "thinking":
            return [
                f"{head} section: all of each is reasoning (no `</think>` in DeepSeek-V4's "
                "thinking mode, the default), and only the answer after it is scored; a "
                "server that does not think answers in chat mode: run with --thinking chat"
            ]
        return [
            f"{head} text: the server sent all of each as reasoning, and only the answer is "
            "scored; check the server's reasoning parser (vLLM --reasoning-parser)"
        ]

    def gate_line(self) -> str | None:
        """The one line an --accuracy-min failure prints."""
        below = self.below()
        if not below:
            return None
        figures = ", ".join(f"conc {p.conc} {p.strict_match.exact_match:.3f}" for p in below)
        return (
            f"GSM8K strict-match exact match below --accuracy-min {below[0].accuracy_min:g}: "
            f"{figures} (n={below[0].n}; per-question answers in {self.results_dir})"
        )


async def measure_accuracy(
    spec: RunSpec,
    data: AccuracyData,
    results_dir: Path,
    on_score: Callable[[AccuracyResult], None] | None = None,
) -> AccuracyOutcome:
    """The accuracy points of `spec` in `results_dir`/accuracy_<task>/; `on_score` gets
    each score once it is written (the live exporter's gauge)."""
    task = spec.scoring.accuracy
    assert task is not None
    directory = ResultsDir(results_dir).accuracy_dir(task)
    concs = spec.scoring.accuracy_concs(spec.load.conc)
    sub = spec.with_(
        conc=concs,
        num_prompts=len(data.questions),
        results_dir=directory,
        trials=1,
        duration_s=None,
        workers=1,  # the accuracy points run in this process (their replies are scored here)
        # the accuracy points are run whole again when the sweep is resumed: their replies
        # are scored from memory, so a point cannot continue where it stopped
        resume=False,
        overwrite=spec.output.overwrite or spec.output.resume,
        # the sweep's own extra formats are its points', not these
        vllm_result=None,
        aiperf_artifacts=None,
    )
    scores: dict[int, AccuracyResult] = {}
    workloads: list[AccuracyWorkload] = []

    @contextlib.asynccontextmanager
    async def drive(pieces: RunPieces) -> AsyncIterator[Driver]:
        workload = AccuracyWorkload(
            sub, pieces.tokenizer, pieces.workload.options, data.questions, data.shots
        )
        workloads.append(workload)
        yield _AccuracyDriver(workload, task, scores, on_score, pieces.features)

    sweep = await sweep_points(sub, SweepOptions(drive=drive, outputs=RunFiles(sub)))
    return AccuracyOutcome(
        directory,
        tuple(scores[c] for c in concs if c in scores),
        sweep,
        _unanswered(sub, workloads),
        sub.workload.thinking,
    )


def _unanswered(spec: RunSpec, workloads: Sequence[AccuracyWorkload]) -> dict[int, int]:
    """Per concurrency, the replies that had text but no answer section to score."""
    return {
        conc: sum(no_answer(asked.reply, spec, workload.options) for asked in replies)
        for workload in workloads
        for conc, replies in workload.asked.items()
    }


class _AccuracyDriver(Lives):
    """Runs an accuracy point in this process; its replies are scored as it is written."""

    def __init__(
        self,
        workload: AccuracyWorkload,
        task: str,
        scores: dict[int, AccuracyResult],
        on_score: Callable[[AccuracyResult], None] | None,
        features: Features,
    ) -> None:
        super().__init__()
        self.on_score = on_score
        self.workload = workload
        self.task = task
        self.scores = scores
        self.features = features

    async def run_point(self, context: RunContext, conc: int) -> PointOutcome:
        plan = await asyncio.to_thread(self.workload.point, conc)

        def send(records: PointRecords) -> Point:
            return Point(context, plan, on_record=records.add, on_warmup=records.add_warmup)

        scoring = _Scoring(self, context.spec, conc)
        extensions = self.features.for_point(context, conc, (scoring,))
        return await self.run(PointLife(context, conc, send, extensions))


class _Scoring(Extension):
    """Each reply of an accuracy point against its gold, both filters, once the point is
    written (also a point the run stopped: its score says `complete: false`)."""

    def __init__(self, driver: _AccuracyDriver, spec: RunSpec, conc: int) -> None:
        self.driver = driver
        self.spec = spec
        self.conc = conc

    def write_files(self, store: ResultsDir, result: PointResult, measured: Measured) -> None:
        driver, spec, conc = self.driver, self.spec, self.conc
        options = driver.workload.options
        complete = measured.complete
        records = {r.request_id: r for r in measured.records} if complete else {}
        samples: list[AccuracySample] = []
        for index, asked in enumerate(driver.workload.asked.get(conc, [])):
            scored = gsm8k.score(reply_content(asked.reply, spec, options), asked.item.answer)
            record = records.get(index)
            samples.append(
                AccuracySample(
                    id=asked.item.id,
                    extracted_strict=scored.strict,
                    extracted_flexible=scored.flexible,
                    gold=gsm8k.gold(asked.item.answer),
                    correct=scored.strict_correct,
                    correct_flexible=scored.flexible_correct,
                    finish_reason=record.finish_reason if record is not None else None,
                )
            )
        minimum = spec.scoring.accuracy_min
        strict = _figure(gsm8k.exact_match([s.correct for s in samples]))
        score = AccuracyResult(
            task=driver.task,
            protocol=PROTOCOL,
            conc=conc,
            n=len(samples),
            strict_match=strict,
            flexible_extract=_figure(gsm8k.exact_match([s.correct_flexible for s in samples])),
            answered=sum(1 for r in records.values() if r.error is None),
            accuracy_min=minimum,
            passed=None if minimum is None else strict.exact_match >= minimum,
            complete=complete,
        )
        store.write_accuracy(score, samples)
        driver.scores[conc] = score
        if driver.on_score is not None:
            driver.on_score(score)


def _figure(match: gsm8k.ExactMatch) -> ExactMatchFigure:
    return ExactMatchFigure(exact_match=match.value, stderr=match.stderr, n=match.n)
