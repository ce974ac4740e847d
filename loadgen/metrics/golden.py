"""A point's acceptance length against its golden curve (config/golden.py): pure."""

from __future__ import annotations

from typing import Any

from loadgen.config.golden import GoldenAL

FIELDS = (
    "golden_acceptance_curve",
    "golden_acceptance_length",
    "golden_acceptance_drift",
    "golden_acceptance_ok",
    "golden_acceptance_tolerance",
    "golden_acceptance_note",
)


def golden_fields(
    golden: GoldenAL | None,
    spec_tokens: int | None,
    measured: float | None,
    source: str | None,
    disagreement: str | None = None,
) -> dict[str, Any]:
    """The golden AL for the point's K, the measured AL's relative drift from it (the
    best valid source: `acceptance_length`), and whether that is within tolerance. A
    point that cannot be checked (no K, no entry for it, no valid AL) fails the check:
    a conformance run that checked nothing must not pass. Nor does a point whose stream
    and per-request ALs disagree (`disagreement`, acceptance.al_disagreement): one of
    them is not these requests', and stats tuned to the golden value must not pass
    because the other source was published, or the other way round."""
    if golden is None:
        return dict.fromkeys(FIELDS)
    fields: dict[str, Any] = {
        **dict.fromkeys(FIELDS),
        # which curve the point is held to: the lane's thinking setting picks it
        "golden_acceptance_curve": f"{golden.model}/{golden.mode} in {golden.path.name}",
        "golden_acceptance_ok": False,
        "golden_acceptance_tolerance": golden.tolerance,
    }
    target = golden.al_for(spec_tokens)
    if target is None:
        fields["golden_acceptance_note"] = (
            f"{golden.model}/{golden.mode} in {golden.path.name} has no entry for K="
            f"{spec_tokens if spec_tokens else 'unknown (give --spec-tokens)'}"
        )
        return fields
    fields["golden_acceptance_length"] = target
    if measured is None:
        fields["golden_acceptance_note"] = (
            f"no valid acceptance length was measured (golden {target:.3f}, K={spec_tokens}, "
            f"{golden.model}/{golden.mode})"
        )
        return fields
    if disagreement is not None:
        fields["golden_acceptance_note"] = (
            f"not checked: {disagreement}, so neither is these requests' AL "
            f"(golden {target:.3f}, K={spec_tokens}, {golden.model}/{golden.mode})"
        )
        return fields
    drift = (measured - target) / target
    fields.update(
        golden_acceptance_drift=drift,
        golden_acceptance_ok=abs(drift) <= golden.tolerance,
        golden_acceptance_note=f"{source} AL {measured:.3f} vs golden {target:.3f} "
        f"(K={spec_tokens}, {golden.model}/{golden.mode})",
    )
    return fields
