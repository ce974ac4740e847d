"""A disaggregated run's TTFT taken apart (`--server-metrics prefill=URL decode=URL ...`):
after the point, from each role's histograms read before and after it (the scrapes the
point already makes; nothing during the measured phase), the point gets `ttft_parts`
(metrics/ttft_parts.py for the arithmetic, docs/results.md for the series)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import msgspec

from loadgen.metrics.server import ServerSnapshot, merge_snapshots
from loadgen.metrics.ttft_parts import ttft_parts
from loadgen.results.point import TtftParts as TtftPartsResult
from loadgen.run.assemble import PointParts
from loadgen.run.extension import Extension, Measured

DISAGGREGATED_ROLES = ("prefill", "decode")


def disaggregated(roles: Mapping[str, str]) -> bool:
    """A run whose --server-metrics name a prefill or a decode worker."""
    return any(role in DISAGGREGATED_ROLES for role in roles.values())


class TtftParts(Extension):
    def __init__(self, roles: Mapping[str, str]) -> None:
        self.roles = roles  # URL -> role

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        before = self._by_role(measured.before.each)
        after = self._by_role(measured.after.each) if measured.after is not None else {}
        ttfts = [r.ttft_ns for r in measured.records if r.ok and r.ttft_ns is not None]
        client = sum(ttfts) / len(ttfts) / 1e6 if ttfts else None
        figures = ttft_parts(before, after, client)
        return dataclasses.replace(parts, ttft_parts=msgspec.convert(figures, TtftPartsResult))

    def _by_role(
        self, each: Mapping[str, ServerSnapshot | None]
    ) -> dict[str, ServerSnapshot | None]:
        """Each role's URLs summed (None when any of them was not read)."""
        out: dict[str, ServerSnapshot | None] = {}
        for role in dict.fromkeys(self.roles.values()):
            urls = [url for url, r in self.roles.items() if r == role]
            out[role] = merge_snapshots([each.get(url) for url in urls])
        return out
