"""al_matrix.yaml: a sweep tree's acceptance lengths in InferenceX's golden-file shape.

InferenceX's `golden_al_distribution/*.yaml` (e.g. dsv4_mtp.yaml) holds, per model and
thinking mode, the AL per draft length K:

    deepseek-v4-pro:
      thinking_on:
        2: 2.27

A sweep file whose lanes are K x thinking mode (examples/al-matrix.yaml) produces the same
file for its own server, so a team can review its curve and hold later runs to it with
`--golden-al <tree>/al_matrix.yaml`. Each lane's key: the model (--golden-al-model, else
--model, else the name the server serves), the mode (--thinking: thinking -> thinking_on,
chat -> thinking_off) and K (the points' `spec_tokens`); the value is the mean of the
published `acceptance_length` of its complete points (AL does not depend on concurrency;
the comments list each point, its source and the spread). Values are rounded to 2
decimals, as InferenceX writes them. Lanes that measured no AL are left out (and said so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from loadgen.config.golden import MODES
from loadgen.config.spec import RunSpec
from loadgen.results.files import write_atomic
from loadgen.results.point import PointResult
from loadgen.results.store import AL_MATRIX_FILE


@dataclass(frozen=True, slots=True)
class LaneAL:
    """One lane's points, with what names its entry."""

    name: str
    model: str
    mode: str  # thinking_on | thinking_off
    points: Sequence[PointResult]


@dataclass(slots=True)
class _Entry:
    values: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def lane_al(name: str, spec: RunSpec, points: Mapping[int, PointResult]) -> LaneAL:
    """A lane's entry key from its settings and its complete points."""
    complete = [p for _, p in sorted(points.items()) if p.status.complete]
    served = next((p.identity.model_id for p in complete if p.identity.model_id), None)
    model = (
        (spec.scoring.golden_al.model if spec.scoring.golden_al else None)
        or spec.target.model
        or served
    )
    return LaneAL(
        name,
        model or "unknown-model",
        MODES.get(spec.workload.thinking, spec.workload.thinking),
        complete,
    )


def al_matrix(lanes: Sequence[LaneAL]) -> str | None:
    """The YAML text (comments first), None when no lane measured an AL."""
    entries: dict[tuple[str, str, int], _Entry] = {}
    skipped: list[str] = []
    for lane in lanes:
        measured = [
            p
            for p in lane.points
            if p.metrics.acceptance_length is not None and p.metrics.spec_tokens
        ]
        if not measured:
            skipped.append(lane.name)
        for p in measured:
            assert p.metrics.acceptance_length is not None and p.metrics.spec_tokens
            entry = entries.setdefault((lane.model, lane.mode, p.metrics.spec_tokens), _Entry())
            entry.values.append(p.metrics.acceptance_length)
            entry.notes.append(
                f"{lane.name} conc {p.conc}: {p.metrics.acceptance_length:.3f} "
                f"({p.metrics.acceptance_length_source})"
            )
    if not entries:
        return None
    document: dict[str, dict[str, dict[int, float]]] = {}
    comments = [
        "# Acceptance length (AL) per model, thinking mode and draft length K,",
        "# measured by loadgen; the shape of InferenceX's golden_al_distribution/*.yaml",
        "# (use it as --golden-al FILE). Each value: the mean over the points below.",
        "#",
    ]
    for (model, mode, k), entry in sorted(entries.items(), key=_inferencex_order):
        mean = sum(entry.values) / len(entry.values)
        document.setdefault(model, {}).setdefault(mode, {})[k] = round(mean, 2)
        spread = max(entry.values) - min(entry.values)
        comments.append(
            f"# {model} {mode} K={k}: {mean:.3f} (spread {spread:.3f}) from "
            + "; ".join(entry.notes)
        )
    if skipped:
        comments.append(f"# no AL measured (left out): {', '.join(skipped)}")
    body = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    return "\n".join(comments) + "\n" + body


def _inferencex_order(item: tuple[tuple[str, str, int], _Entry]) -> tuple[str, bool, int]:
    (model, mode, k), _ = item
    return model, mode != "thinking_on", k  # thinking_on first, as InferenceX writes it


def write_al_matrix(tree: Path, lanes: Sequence[LaneAL]) -> Path | None:
    text = al_matrix(lanes)
    if text is None:
        return None
    return write_atomic(tree / AL_MATRIX_FILE, text.encode())
