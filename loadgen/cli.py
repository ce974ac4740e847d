"""The `loadgen` command: subcommands, signals, and the one map from errors to exit codes.

`loadgen [run] ...` measures a server, `loadgen --config sweep.yaml` runs a sweep file's
lanes, `loadgen compare|report RUN...` compares results, `loadgen merge ...` combines shard
results, `loadgen sim ...` runs the simulator, `loadgen serve ...` runs the sidecar. Every
run-level failure is a `LoadgenError`; `main` turns it into one line on stderr and its
exit status, here and nowhere else.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.config.commands import COMMANDS
from loadgen.config.redact import redact_text
from loadgen.errors import Interrupted, LoadgenError, UsageError
from loadgen.wording import printable

if TYPE_CHECKING:
    from loadgen.config.spec import RunSpec
    from loadgen.config.sweepfile import SweepPlan
    from loadgen.orchestrate.accuracy import AccuracyData
    from loadgen.orchestrate.measure import SweepOutcome
    from loadgen.results.accuracy import AccuracyResult


def main(argv: Sequence[str] | None = None) -> int:
    """Every subcommand; every LoadgenError any of them raises ends here, as one line."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args and args[0] in COMMANDS else "run"
    prog = "loadgen" if command in ("run", "compare", "report", "merge") else f"loadgen {command}"
    try:
        return _dispatch(command, args[1:] if args and args[0] == command else args)
    except LoadgenError as exc:
        return _report(exc, prog)
    except KeyboardInterrupt:  # Ctrl-C outside a run's loop (before it, or as it closed)
        return Interrupted.exit_code


def _dispatch(command: str, args: list[str]) -> int:
    if command == "sim":
        from loadgen.sim.cli import main as sim_main

        return int(sim_main(args))
    if command == "serve":
        from loadgen.sidecar.serve import main as serve_main

        return int(serve_main(args))
    if command in ("compare", "report"):
        from loadgen.compare.cli import compare_main, report_main

        return (compare_main if command == "compare" else report_main)(args)
    if command == "merge":
        return merge(args)
    if command == "profile":
        return profile(args)
    if args and not args[0].startswith("-"):
        raise unknown_command(args[0])  # a run takes flags only: a word is a typo
    if any(a == "--config" or a.startswith("--config=") for a in args):
        return run_config(args)
    from loadgen.config.args import parse_run_args  # a run's options: not for the others

    spec, metrics_port, metrics_host = parse_run_args(args, os.environ)
    if spec.scoring.require_lossless:  # one run has no lane to hold its outputs against
        raise UsageError(
            "--require-lossless judges a sweep file's lanes (--config) or `loadgen compare "
            "--require-lossless RUN...`; one run has nothing to compare its outputs with"
        )
    if spec.scoring.verdict:
        raise UsageError(
            "--verdict judges a sweep file's lanes (--config) or `loadgen compare --verdict "
            "A B`; one run has nothing to be judged against"
        )
    for note in spec.output.ignored_flags:  # compatibility flags that change nothing, said once
        print(f"loadgen: note: {note}", file=sys.stderr)
    return run(spec, metrics_port=metrics_port, metrics_host=metrics_host)


def unknown_command(word: str) -> UsageError:
    """`loadgen comapre ...`: the nearest command, as a mistyped flag gets the nearest flag."""
    close = difflib.get_close_matches(word, list(COMMANDS), n=1, cutoff=0.6)
    hint = (
        f"did you mean `loadgen {close[0]}`?"
        if close
        else f"the commands are {', '.join(COMMANDS)} (a run takes flags only: loadgen --help)"
    )
    return UsageError(f"unknown command {word!r}; {hint}")


def profile(argv: Sequence[str]) -> int:
    """`loadgen profile --scenario inferencex-agentx-mvp ...`: AIPerf's command line as
    InferenceX types it (config/aiperf_profile.py)."""
    from loadgen.config.aiperf_profile import profile_spec

    spec = profile_spec(argv, os.environ)
    for note in spec.output.ignored_flags:
        print(f"loadgen: note: {note}", file=sys.stderr)
    return run(spec)


def merge(argv: Sequence[str]) -> int:
    """`loadgen merge DIR... --results OUT`: shard result directories -> one result set."""
    import argparse
    from pathlib import Path

    from loadgen.orchestrate.merge import merge_shards

    parser = argparse.ArgumentParser(
        prog="loadgen merge",
        description="Combine the result directories of the N shards "
        "of one run (`loadgen --shard I/N ...`) into one result set, exactly: every point "
        "is summarized again from all shards' raw records.",
    )
    parser.add_argument(
        "dirs", nargs="+", type=Path, metavar="DIR", help="each shard's --results directory"
    )
    parser.add_argument(
        "--results",
        type=Path,
        required=True,
        metavar="OUT",
        help="where the merged result set goes (a new directory)",
    )
    args = parser.parse_args(list(argv))  # argparse's own usage errors exit 2 as well
    outcome = merge_shards(args.dirs, args.results)
    for line in outcome.warnings:
        print(f"loadgen merge: WARNING: {line}", file=sys.stderr)
    for line in outcome.refused:
        print(f"loadgen merge: refused {line}", file=sys.stderr)
    print(
        f"loadgen merge: {len(outcome.points)} point(s) of {len(args.dirs)} shards in "
        f"{outcome.results_dir}",
        file=sys.stderr,
    )
    return outcome.exit_code


def run(spec: RunSpec, *, metrics_port: int | None = None, metrics_host: str = "127.0.0.1") -> int:
    """Run the sweep on uvloop; Ctrl-C/SIGTERM/SIGHUP stop it cleanly (partial results kept)."""
    return _on_loop(_run(spec, metrics_port, metrics_host), spec.output.results_dir)


def run_config(argv: Sequence[str]) -> int:
    """`loadgen --config sweep.yaml [flags for every lane]`: every lane, then the comparison
    and the HTML report of the tree."""
    from loadgen.config.sweepfile import load_sweep, parse_config_argv

    path, tree, overrides = parse_config_argv(argv)
    plan = load_sweep(path, overrides=overrides, env=os.environ, results_dir=tree)
    return _on_loop(_run_lanes(plan), plan.results_dir)


async def _run_lanes(plan: SweepPlan) -> int:
    from loadgen.compare.cli import publish_tree, require_lossless
    from loadgen.orchestrate.lanes import check_workloads, run_lanes

    await check_workloads(plan)
    outcome = await run_lanes(plan)
    print(f"loadgen: results in {outcome.results_dir} (one directory per lane)", file=sys.stderr)
    if outcome.measured:
        verdict = any(lane.spec.scoring.verdict for lane in plan.lanes)
        report, check = await asyncio.to_thread(publish_tree, outcome.results_dir, verdict)
        print(f"loadgen: report in {report}", file=sys.stderr)
        if any(lane.spec.scoring.require_lossless for lane in plan.lanes):
            require_lossless(check)
    return outcome.exit_code


def _report(exc: LoadgenError, prog: str) -> int:
    # redacted: a preflight error names --base-url, credentials and all (CI logs keep it)
    # printable: an error line may quote a server (a model name, a body)
    print(f"{prog}: error: {printable(redact_text(str(exc)))}", file=sys.stderr)
    return exc.exit_code


# SIGHUP: the terminal (or the ssh session) went away; its default would end the process
# before the point's summary is written.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _on_loop(work: Coroutine[None, None, int], results_dir: Path | None) -> int:
    """The run on uvloop, guarded; the stop signals' handlers as they were, afterwards."""
    import uvloop

    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        return int(uvloop.run(_guarded(work, results_dir)))
    finally:
        for sig, handler in before.items():
            if handler is not None:
                signal.signal(sig, handler)


async def _guarded(work: Awaitable[int], results_dir: Path | None) -> int:
    """Signals cancel the run: what was measured stays on disk, and the stop is the
    `Interrupted` line and status (main() prints every LoadgenError)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, task.cancel)
    try:
        return await work
    except asyncio.CancelledError:
        from loadgen.results.store import holds_measurements

        stopped = Interrupted(
            f"interrupted; everything measured so far is in "
            f"{results_dir} (the last point is marked complete: false)"
            if results_dir is not None and holds_measurements(results_dir)
            else "interrupted before any point began; nothing was measured"
        )
        print(f"loadgen: {stopped}", file=sys.stderr)
        return stopped.exit_code
    finally:
        _ignore_from_now(loop)


def _ignore_from_now(loop: asyncio.AbstractEventLoop) -> None:
    """The run is over, the loop winds down: a Ctrl-C pressed again now would be a
    KeyboardInterrupt traceback out of asyncio's teardown, so it is ignored (the
    signals blocked meanwhile: none falls between the loop's handler and SIG_IGN)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


async def _run(spec: RunSpec, metrics_port: int | None, metrics_host: str) -> int:
    from loadgen.orchestrate.accuracy import read_data

    # --accuracy's files are read first: a missing one is one line, before any measurement
    accuracy = await asyncio.to_thread(read_data, spec) if spec.scoring.accuracy else None
    if spec.scoring.profile is not None:  # a rehearsal's points, each a run of its own
        from loadgen.orchestrate.endpoints_profile import rehearse

        return await rehearse(spec, accuracy)
    if spec.load.find_max is not None:  # each probe is a run of its own (orchestrate/capacity.py)
        from loadgen.orchestrate.capacity import find_capacity

        capacity = await find_capacity(spec)
        print(f"loadgen: capacity search in {capacity.results_dir}/capacity.json", file=sys.stderr)
        return 0
    from loadgen.orchestrate.measure import measure

    if metrics_port is None:
        return await _checked(spec, accuracy, await measure(spec))
    from loadgen.orchestrate.live import live_observer

    async with live_observer(spec, metrics_port, metrics_host) as observer:
        outcome = await measure(spec, observer=observer)
        return await _checked(spec, accuracy, outcome, observer.accuracy_scored)


async def _checked(
    spec: RunSpec,
    accuracy: AccuracyData | None,
    outcome: SweepOutcome,
    on_score: Callable[[AccuracyResult], None] | None = None,
) -> int:
    """The sweep's closing lines, then its accuracy points (--accuracy), and the status."""
    from loadgen.orchestrate.accuracy import accuracy_done, measure_accuracy

    status = _said(spec, outcome)
    if accuracy is None or outcome.interrupted:
        return status
    if outcome.nothing_to_resume and accuracy_done(spec, outcome.results_dir):
        return status

    checked = await measure_accuracy(spec, accuracy, outcome.results_dir, on_score)
    for line in checked.lines():
        print(f"loadgen: {line}", file=sys.stderr)
    return status or checked.exit_code


def _said(spec: RunSpec, outcome: SweepOutcome) -> int:
    """The sweep's closing lines on stderr, and its exit status."""
    if outcome.nothing_to_resume:
        print(
            f"loadgen: every point of the run in {outcome.results_dir} is complete; "
            "nothing to resume",
            file=sys.stderr,
        )
        return 0
    print(f"loadgen: results in {outcome.results_dir}", file=sys.stderr)
    for conc in outcome.failed_points:
        point = next(p for p in outcome.points if p.conc == conc)
        print(
            f"loadgen: conc {conc}: error rate {point.error_rate:.1%} exceeds "
            f"--max-error-rate {spec.deadlines.max_error_rate:.1%}",
            file=sys.stderr,
        )
    for conc in outcome.golden_failed:
        metrics = next(p for p in outcome.points if p.conc == conc).result.metrics
        drift = metrics.golden_acceptance_drift
        print(
            f"loadgen: conc {conc}: acceptance outside --golden-al: "
            f"{metrics.golden_acceptance_note}"
            f"{'' if drift is None else f', drift {drift:+.1%}'} "
            f"(tolerance {metrics.golden_acceptance_tolerance or 0:.0%})",
            file=sys.stderr,
        )
    return outcome.exit_code
