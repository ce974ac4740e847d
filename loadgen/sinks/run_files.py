"""The files a sweep writes beside its own: the vLLM-format result (`--save-result`) per
complete point, AIPerf's artifacts (`--aiperf-artifacts`) per point, and sweep.csv, the
console table and the sweep plot at the end. The run engine calls these through
`RunOutputs` (run/observers.py) and imports no sink."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from loadgen.config.spec import RunSpec
from loadgen.metrics.server_series import PointCapture
from loadgen.records import RequestRecord
from loadgen.results.point import PointResult
from loadgen.results.store import AiperfArtifacts, ResultsDir
from loadgen.sinks.aiperf_artifacts import ArtifactRun, write_aiperf_artifacts
from loadgen.sinks.sweep_files import write_sweep_files
from loadgen.sinks.vllm_result import write_vllm_result


class RunFiles:
    """The standard outputs of a run of `spec`."""

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec

    def point_written(
        self,
        store: ResultsDir,
        result: PointResult,
        records: Sequence[RequestRecord],
        complete: bool,
        capture: PointCapture | None = None,
    ) -> None:
        spec = self.spec
        options = spec.output.vllm_result
        if options is not None and complete:  # vLLM writes none when stopped
            write_vllm_result(store.path, result, records, options, points=len(spec.load.conc))
        if capture is not None:  # stopped ones too
            self._artifacts(result, records, capture)

    def point_kept(
        self,
        store: ResultsDir,
        result: PointResult,
        records: Sequence[RequestRecord],
        capture: PointCapture,
    ) -> None:
        where = self._where(result)
        if where is not None and not all(
            p.is_file() for p in (where.records_file, where.aggregate_file)
        ):
            self._artifacts(result, records, capture)
            print(
                f"loadgen: conc {result.conc}: kept from the run resumed; its AIPerf "
                f"artifacts were missing, written to {where.path} from its records",
                file=sys.stderr,
            )

    def _where(self, result: PointResult) -> AiperfArtifacts | None:
        root = self.spec.output.aiperf_artifacts
        if root is None:
            return None
        return AiperfArtifacts.for_point(root, result.conc, len(self.spec.load.conc))

    def _artifacts(
        self, result: PointResult, records: Sequence[RequestRecord], capture: PointCapture
    ) -> None:
        where = self._where(result)
        if where is None:
            return
        run = ArtifactRun.of(
            self.spec,
            result.identity.run_id,
            result.identity.model_id or "",
            capture.metrics_urls,
            capture.offset_ns,
        )
        write_aiperf_artifacts(where, result, records, capture.warmup, capture.scrapes, run)

    def sweep_written(self, store: ResultsDir, results: Sequence[PointResult]) -> list[str]:
        return write_sweep_files(store, results)
