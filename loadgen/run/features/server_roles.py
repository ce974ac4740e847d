"""--server-metrics ROLE=URL: a disaggregated deployment's servers seen per role (frontend,
prefill, decode, worker). Each per-URL row says its role, and the point gets
`server_metrics_by_role`, each role's figures from its URLs (metrics/server_roles.py)."""

from __future__ import annotations

import dataclasses

import msgspec

from loadgen.metrics.server_roles import per_role_fields
from loadgen.metrics.summary import client_maxima
from loadgen.results.point import ServerRoleFigures
from loadgen.run.assemble import PointParts
from loadgen.run.extension import Extension, Measured


class ServerRoles(Extension):
    def __init__(self, roles: dict[str, str], spec_tokens: int | None) -> None:
        self.roles = roles  # URL -> role, in the order given
        self.spec_tokens = spec_tokens  # --spec-tokens: the acceptance rules' K

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        """After the telemetry's part: its per-URL rows are the role's gauges."""
        url_rows = [
            msgspec.structs.replace(row, role=self.roles.get(row.url, "worker"))
            for row in parts.server_metrics_by_url or ()
        ]
        after = measured.after.each if measured.after is not None else None
        maxima = client_maxima(measured.records)
        rows = per_role_fields(
            self.roles, measured.before.each, after, url_rows, self.spec_tokens, maxima
        )
        return dataclasses.replace(
            parts,
            server_metrics_by_url=url_rows if parts.server_metrics_by_url is not None else None,
            server_metrics_by_role=[msgspec.convert(row, ServerRoleFigures) for row in rows],
        )
