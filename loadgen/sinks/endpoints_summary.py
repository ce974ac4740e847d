"""`--profile mlperf-endpoints`' summary: mlperf_endpoints.json and its console text."""

from __future__ import annotations

from pathlib import Path

import msgspec

from loadgen.metrics.endpoints_rules import EndpointsSummary, Outcome
from loadgen.results.files import write_atomic


def write_summary(path: Path, summary: EndpointsSummary) -> Path:
    return write_atomic(path, msgspec.json.format(msgspec.json.encode(summary)) + b"\n")


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_summary(summary: EndpointsSummary) -> str:
    """The statement first, the curve's headline, then every rule with its outcome."""
    lines = [
        f"MLPerf Endpoints rehearsal: {summary.statement}.",
        f"Points placed by {summary.source}; C_min {summary.c_min}, C_max {summary.c_max}; "
        + ", ".join(f"{name} {lo}-{hi}" for name, (lo, hi) in summary.regions.items()),
        f"  {'conc':>6} {'region':<10} {'mand':<4} {'system tps':>11} {'tps/user':>9} "
        f"{'TPOT p90':>9} {'TTFT p90':>9} {'secs':>6} {'gsm8k':>6}",
    ]
    for p in summary.points:
        lines.append(
            f"  {p.conc:>6} {p.region or '-':<10} {'yes' if p.mandatory else '':<4} "
            f"{_num(p.system_tps, ',.1f'):>11} {_num(p.tps_per_user, '.1f'):>9} "
            f"{_num(p.tpot_p90_ms, '.2f'):>9} {_num(p.ttft_p90_ms, '.1f'):>9} "
            f"{_num(p.duration_s, '.1f'):>6} {_num(p.gsm8k_strict, '.3f'):>6}"
        )
    lines.append("Rules checked:")
    mark = {Outcome.MET: "met", Outcome.NOT_MET: "NOT MET", Outcome.NOT_CHECKED: "not checked"}
    for rule in summary.rules:
        lines.append(f"  [{mark[rule.outcome]:<11}] {rule.section:<11} {rule.rule}: {rule.detail}")
    unmet = [r.rule for r in summary.rules if r.outcome is Outcome.NOT_MET]
    lines.append(f"Not met: {', '.join(unmet)}." if unmet else "Every rule checked here is met.")
    return "\n".join(lines)
