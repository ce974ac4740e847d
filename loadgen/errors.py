"""One exception tree for run-level failures, each class carrying its exit status and its
stop code.

A per-request failure is never an exception past the transport: it is an `ErrorKind` on
the record. What ends a run is one of these: `loadgen.cli` maps every one of them to one
line on stderr and its `exit_code` in a single place, and a point, run.json and
lanes.json record its `stop_reason` (run/stops.py's `stop_of`; the codes are listed in
docs/results.md, and tools read them: a class keeps its code). A subclass inherits both
unless it is a case of its own.

The tree (exit status, stop_reason, module under loadgen/; tests/test_errors.py holds
this drawing to the classes):

    LoadgenError                   1    error                    errors.py
    ├── UsageError                 2    bad_input                errors.py
    │   ├── SpecError              2    bad_input                config/parsers.py
    │   │   ├── SweepFileError     2    bad_input                config/sweep_yaml.py
    │   │   └── Escapes            2    bad_input                sidecar/options.py
    │   ├── ResultFileError        2    bad_input                results/point.py
    │   ├── EngineMismatch         2    bad_input                client/engine_detect.py
    │   ├── PowerCsvFileError      2    bad_input                client/gpu_metrics.py
    │   ├── ServiceError           2    bad_input                sidecar/settings.py
    │   ├── ConfigError            2    bad_input                sim/config.py
    │   ├── ShardRefused           2    bad_input                scale/coordinator/link.py
    │   └── VerdictRefused         2    bad_input                compare/verdict_inputs.py
    ├── ServerError                1    server_error             errors.py
    │   ├── PreflightError         1    server_error             client/preflight.py
    │   ├── MetricsUrlError        1    server_error             client/server_metrics.py
    │   │   └── GpuMetricsUrlError 1    server_error             client/gpu_metrics.py
    │   ├── ResetUnavailable       1    server_error             client/cache_reset.py
    │   ├── ProfilerUnavailable    2    server_error             client/server_profiler.py
    │   ├── ServerFailedToStart    1    server_failed_to_start   run/launched_server.py
    │   └── ServerGone             1    server_gone              run/server_watch.py
    ├── SetupError                 1    setup_error              errors.py
    │   ├── TokenizerError         1    setup_error              tokenizer.py
    │   ├── SimulatorError         1    setup_error              run/embedded_sim.py
    │   ├── SimSetupError          1    setup_error              sim/cli.py
    │   ├── OutOfDescriptors       1    out_of_file_descriptors  client/transport.py
    │   ├── ResultsWriteError      1    results_write_failed     results/files.py
    │   ├── WorkerDied             1    worker_died              scale/pool.py
    │   ├── CoordinatorLost        1    coordinator_lost         run/shard_sync.py
    │   └── MergeRefused           1    setup_error              orchestrate/coordinated.py
    ├── Interrupted                130  interrupted              errors.py
    ├── ShardStopped               1    shard_stopped            run/shard_sync.py
    └── NotLossless                1    error                    compare/cli.py

SimulatorError and SimSetupError are one failure seen from two processes: the `loadgen
sim` child that cannot bind its port, and the parent whose embedded simulator never
answered (the simulator imports nothing of the run, so each names its own).
"""

from __future__ import annotations

from typing import ClassVar


class LoadgenError(Exception):
    """A run-level failure; str() is the line to show (what is wrong, what to do)."""

    exit_code: ClassVar[int] = 1
    stop_reason: ClassVar[str] = "error"


class UsageError(LoadgenError, ValueError):
    """Bad input: a flag, an option, a file. The user fixes the command line."""

    exit_code = 2
    stop_reason = "bad_input"


class ServerError(LoadgenError):
    """The server is unreachable, serves something else, or stopped answering."""

    stop_reason = "server_error"


class SetupError(LoadgenError):
    """This machine cannot run the job: tokenizer, embedded simulator, disk, limits."""

    stop_reason = "setup_error"


class Interrupted(LoadgenError):
    """Ctrl-C, SIGTERM or the sidecar's DELETE; what was measured is on disk."""

    exit_code = 130
    stop_reason = "interrupted"
