"""The results directory: every file name loadgen writes or reads back is spelled here.

    run.json                    the run (settings, server, attempts, points)
    conc_<N>.json               one point's PointResult (results/point.py)
    requests_conc_<N>.jsonl     one record per finished request (results/jsonl.py)
    gpu_power_conc_<N>.csv      one point's --gpu-metrics samples, nvidia-smi's CSV layout
    conc_<N>_trial_<k>.json     --trials: trial k's own PointResult (k = 1..N); conc_<N>.json
                                is then the point pooled over its trials (run/trials.py)
    requests_conc_<N>_trial_<k>.jsonl  --trials: trial k's records (no pooled JSONL: the
                                trials' files are the records)
    accuracy_gsm8k/             --accuracy gsm8k: the accuracy points' own results directory
                                (conc_<N>.json, requests_conc_<N>.jsonl, run.json), with
    gsm8k_conc_<N>.json         ... each point's score (results/accuracy.py AccuracyResult)
    gsm8k_samples_conc_<N>.jsonl  ... and its per-question answers (AccuracySample)
    capacity.json               --find-max: the capacity search's answer (orchestrate/capacity.py)
    find_max_<kind>_<load>/     --find-max: each probe's own results directory
    sweep.csv, sweep.png        the sweep table and plot, complete points only
    simulator.log               the embedded simulator's log (--sim), first attempt
    simulator_attempt<K>.log    ... of attempt K (the K-1th --resume): earlier logs kept
    server.log                  the launched server's output (--serve-cmd), first attempt
    server_attempt<K>.log       ... of attempt K, as the simulator's
    lanes.json                  a sweep file's tree: its lanes in the file's order
    al_matrix.yaml              a sweep file's tree: AL per model, mode and K (sinks/al_matrix.py)
    incomplete/<run_id>/        after --resume: the stopped point's files as they were

and, with --aiperf-artifacts DIR (AIPerf's names, which InferenceX's aggregation reads),
DIR/ (one point) or DIR/conc_<N>/ (several): profile_export.jsonl,
profile_export_aiperf.json, server_metrics_export.json.

Everything read back is decoded against its type, and a file that is torn, of another
shape or of another version is one ResultFileError naming the file and the field.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

import msgspec
import orjson

from loadgen.records import RequestRecord
from loadgen.results.accuracy import AccuracyResult, AccuracySample
from loadgen.results.capacity import CapacityResult
from loadgen.results.files import write_atomic
from loadgen.results.jsonl import read_jsonl
from loadgen.results.point import PointResult, ResultFileError, field_message, point_from_json
from loadgen.results.run_record import RunRecord, decode_run

RUN_FILE = "run.json"
LANES_FILE = "lanes.json"
AL_MATRIX_FILE = "al_matrix.yaml"
SWEEP_CSV = "sweep.csv"
SWEEP_PNG = "sweep.png"
SIMULATOR_LOG = "simulator.log"
SIMULATOR_LOG_GLOB = "simulator_attempt*.log"
SERVER_LOG = "server.log"
SERVER_LOG_GLOB = "server_attempt*.log"
CAPACITY_FILE = "capacity.json"
PROBE_PREFIX = "find_max_"
ACCURACY_PREFIX = "accuracy_"
ACCURACY_GLOB = "gsm8k_conc_*.json"
ACCURACY_SAMPLES_GLOB = "gsm8k_samples_conc_*.jsonl"
INCOMPLETE_DIR = "incomplete"
POINT_GLOB = "conc_*.json"
REQUESTS_GLOB = "requests_conc_*.jsonl"
GPU_POWER_GLOB = "gpu_power_conc_*.csv"
AIPERF_RECORDS = "profile_export.jsonl"
AIPERF_AGGREGATE = "profile_export_aiperf.json"
AIPERF_SERVER_METRICS = "server_metrics_export.json"
_POINT_NAME = re.compile(r"^conc_(\d+)\.json$")
# A file that is bigger than any result loadgen writes is not one of its results.
MAX_READ_BYTES = 1 << 30


# A name from outside (a server's model name) inside a file name: the characters that are
# safe in a file name on every system, and a length that leaves room for the rest of the
# name under the usual 255-byte limit.
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._+=@-]+")
MAX_NAME_PART = 80


def holds_measurements(directory: Path) -> bool:
    """Whether a point (or an accuracy point, a lane's, a probe's, a trial's, one set
    aside) has begun writing under `directory`: what an interrupted run can say it kept."""
    globs = (POINT_GLOB, REQUESTS_GLOB, ACCURACY_GLOB)
    return any(next(directory.rglob(pattern), None) is not None for pattern in globs)


def name_part(text: str, limit: int = MAX_NAME_PART) -> str:
    """`text` as one part of a file name: runs of any other character become `_`, no
    leading dot (no hidden file, no `..`), at most `limit` characters (a longer one keeps
    its start and a digest of the whole, so two long names stay apart)."""
    part = _UNSAFE_IN_NAME.sub("_", text).lstrip(".") or "_"
    if len(part) <= limit:
        return part
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{part[: limit - len(digest) - 1]}~{digest}"


@dataclass(frozen=True, slots=True)
class ResultsDir:
    path: Path

    @property
    def run_file(self) -> Path:
        return self.path / RUN_FILE

    @property
    def lanes_file(self) -> Path:
        return self.path / LANES_FILE

    @property
    def sweep_csv(self) -> Path:
        return self.path / SWEEP_CSV

    @property
    def sweep_png(self) -> Path:
        return self.path / SWEEP_PNG

    @property
    def simulator_log(self) -> Path:
        return self.path / SIMULATOR_LOG

    def attempt_simulator_log(self, attempt: int) -> Path:
        """The embedded simulator's log of attempt `attempt` (1: the first run): a resumed
        run's simulator must not overwrite the log (and warnings) of the one before."""
        return self.simulator_log if attempt <= 1 else self.path / f"simulator_attempt{attempt}.log"

    def attempt_server_log(self, attempt: int) -> Path:
        """The launched server's log (--serve-cmd) of attempt `attempt`, as the simulator's."""
        return self.path / (SERVER_LOG if attempt <= 1 else f"server_attempt{attempt}.log")

    @property
    def capacity_file(self) -> Path:
        return self.path / CAPACITY_FILE

    def point_file(self, conc: int, trial: int | None = None) -> Path:
        """conc_<N>.json, or trial k's conc_<N>_trial_<k>.json (--trials)."""
        return self.path / f"conc_{conc}{_trial_suffix(trial)}.json"

    def gpu_power_file(self, conc: int, trial: int | None = None) -> Path:
        return self.path / f"gpu_power_conc_{conc}{_trial_suffix(trial)}.csv"

    def requests_file(self, conc: int, trial: int | None = None) -> Path:
        return self.path / f"requests_conc_{conc}{_trial_suffix(trial)}.jsonl"

    def read_trial_point(self, conc: int, trial: int) -> PointResult:
        path = self.point_file(conc, trial)
        result = point_from_json(read_json(path), str(path))
        if result.conc != conc:
            raise ResultFileError(
                f"{path}: field 'max_concurrency' is {result.conc}, not {conc} as its name says"
            )
        return result

    def accuracy_dir(self, task: str) -> Path:
        """--accuracy: the accuracy points' own results directory (`accuracy_gsm8k`)."""
        return self.path / f"{ACCURACY_PREFIX}{task}"

    def accuracy_file(self, task: str, conc: int) -> Path:
        return self.path / f"{task}_conc_{conc}.json"

    def accuracy_samples_file(self, task: str, conc: int) -> Path:
        return self.path / f"{task}_samples_conc_{conc}.jsonl"

    def write_accuracy(self, result: AccuracyResult, samples: list[AccuracySample]) -> Path:
        """The samples first: a score on disk always has its answers beside it."""
        lines = b"".join(msgspec.json.encode(sample) + b"\n" for sample in samples)
        write_atomic(self.accuracy_samples_file(result.task, result.conc), lines)
        data = orjson.dumps(msgspec.to_builtins(result), option=orjson.OPT_INDENT_2)
        return write_atomic(self.accuracy_file(result.task, result.conc), data)

    def read_accuracy(self, task: str, conc: int) -> AccuracyResult:
        path = self.accuracy_file(task, conc)
        try:
            return msgspec.json.decode(_read_bytes(path), type=AccuracyResult)
        except msgspec.ValidationError as exc:
            raise ResultFileError(f"{path}: {field_message(exc)}") from None
        except msgspec.DecodeError:
            raise ResultFileError(f"{path}: not a JSON accuracy result") from None

    def read_accuracy_samples(self, task: str, conc: int) -> list[AccuracySample]:
        path = self.accuracy_samples_file(task, conc)
        decoder = msgspec.json.Decoder(AccuracySample)
        try:
            return [decoder.decode(line) for line in _read_bytes(path).splitlines() if line]
        except msgspec.ValidationError as exc:
            raise ResultFileError(f"{path}: {field_message(exc)}") from None
        except msgspec.DecodeError:
            raise ResultFileError(f"{path}: a line is not a JSON accuracy sample") from None

    def probe_dir(self, kind: str, load: float) -> Path:
        """--find-max: a probe's own results directory (`find_max_conc_16`,
        `find_max_rate_12.5`)."""
        return self.path / f"{PROBE_PREFIX}{kind}_{load:g}"

    def probe_dirs(self) -> list[Path]:
        return sorted(p for p in self.path.glob(f"{PROBE_PREFIX}*") if p.is_dir())

    def write_capacity(self, capacity: CapacityResult) -> Path:
        """capacity.json (results/capacity.py)."""
        data = orjson.dumps(
            msgspec.to_builtins(capacity), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
        )
        return write_atomic(self.capacity_file, data)

    def read_capacity(self) -> CapacityResult:
        """capacity.json, decoded (a search stopped early has finished: false)."""
        path = self.capacity_file
        try:
            capacity = msgspec.convert(read_json(path), CapacityResult)
        except msgspec.ValidationError as exc:
            raise ResultFileError(
                f"{path}: {field_message(exc)}; not a capacity.json loadgen wrote"
            ) from None
        for probe in capacity.probes:  # every reader follows these: never out of the directory
            self._check_probe_dir(probe.results)
        return capacity

    def _check_probe_dir(self, name: str) -> None:
        """A probe's `results` is one of this directory's find_max_* directories: a path
        (`../x`, `/x`) or a link leading elsewhere would read another run as this one."""
        inside = (
            name.startswith(PROBE_PREFIX)
            and PurePath(name).name == name
            and "\\" not in name
            and (self.path / name).resolve().parent == self.path.resolve()
        )
        if not inside:
            raise ResultFileError(
                f"{self.capacity_file}: probe results {name[:200]!r} is not a "
                f"{PROBE_PREFIX}* directory inside {self.path}; not a capacity.json loadgen wrote"
            )

    def incomplete(self, run_id: str) -> Path:
        return self.path / INCOMPLETE_DIR / run_id

    def point_concs(self) -> list[int]:
        """The concurrencies of the point files present, ascending."""
        found = (_POINT_NAME.match(p.name) for p in self.path.glob(POINT_GLOB))
        return sorted(int(m[1]) for m in found if m)

    def write_point(self, result: PointResult, trial: int | None = None) -> Path:
        data = orjson.dumps(
            result.to_json(),
            option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE,
        )
        return write_atomic(self.point_file(result.conc, trial), data)

    def read_point(self, conc: int) -> PointResult:
        path = self.point_file(conc)
        result = point_from_json(read_json(path), str(path))
        if result.conc != conc:
            raise ResultFileError(
                f"{path}: field 'max_concurrency' is {result.conc}, not {conc} as its name says"
            )
        return result

    def read_points(self) -> dict[int, PointResult]:
        return {conc: self.read_point(conc) for conc in self.point_concs()}

    def read_records(self, conc: int, trial: int | None = None) -> list[RequestRecord]:
        path = self.requests_file(conc, trial)
        try:
            return read_jsonl(path)
        except OSError as exc:
            raise ResultFileError(f"{path}: cannot read it ({exc.strerror or exc})") from None

    def read_run(self) -> RunRecord:
        """run.json, typed (results/run_record.py)."""
        return decode_run(_read_bytes(self.run_file), self.run_file)


def _trial_suffix(trial: int | None) -> str:
    return "" if trial is None else f"_trial_{trial}"


@dataclass(frozen=True, slots=True)
class AiperfArtifacts:
    """One point's AIPerf artifact directory (sinks/aiperf_artifacts.py writes it)."""

    path: Path

    @classmethod
    def for_point(cls, root: Path, conc: int, points: int) -> AiperfArtifacts:
        """ROOT itself for a one-point run (InferenceX's RESULT_DIR/aiperf_artifacts),
        ROOT/conc_<N> for each point of a sweep."""
        return cls(root if points == 1 else root / f"conc_{conc}")

    @property
    def records_file(self) -> Path:
        return self.path / AIPERF_RECORDS

    @property
    def aggregate_file(self) -> Path:
        return self.path / AIPERF_AGGREGATE

    @property
    def server_metrics_file(self) -> Path:
        return self.path / AIPERF_SERVER_METRICS


def read_json(path: Path) -> Any:
    """A JSON file loadgen wrote; ResultFileError (one line) for anything else."""
    try:
        return orjson.loads(_read_bytes(path))
    except orjson.JSONDecodeError as exc:
        raise ResultFileError(f"{path}: not valid JSON ({exc})") from None


def _read_bytes(path: Path) -> bytes:
    try:
        if not path.is_file():
            raise ResultFileError(f"{path}: no such file (or not a regular file)")
        if path.stat().st_size > MAX_READ_BYTES:
            raise ResultFileError(f"{path}: larger than 1 GiB: not a file loadgen wrote")
        return path.read_bytes()
    except OSError as exc:
        raise ResultFileError(f"{path}: cannot read it ({exc.strerror or exc})") from None
