"""A point's --gpu-metrics samples as `gpu_power_conc_<N>.csv`, in nvidia-smi's CSV layout.

    timestamp, index, uuid, power.draw [W]
    1764640000.123456, 0, GPU-..., 412.340 W

as `nvidia-smi --query-gpu=timestamp,index,uuid,power.draw --format=csv` writes it, so
InferenceX's utils/aggregate_power.py reads it with the point's `--save-result` file. The
one deliberate difference: timestamps are epoch seconds (which it accepts), not
nvidia-smi's local-time "YYYY/MM/DD HH:MM:SS.fff", which it must guess the zone of. They
are the samples' monotonic stamps on the result file's own timeline (the first request's
`sent_unix` paired with its monotonic start), so the window it integrates over is exactly
the one loadgen did. `index` numbers the GPUs of every URL in turn (0..n-1), one identity
per GPU as InferenceX expects; failed scrapes write no row. The engine's own file, like
the request records: the raw samples the point's energy was integrated from. Text only:
the point's finish step writes it where the store says.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from loadgen.metrics.energy import PowerSeries, mono_to_unix_ns
from loadgen.metrics.gpu_power import gpu_ids
from loadgen.records import RequestRecord

HEADER = "timestamp, index, uuid, power.draw [W]\n"


def gpu_power_csv(series: Sequence[PowerSeries], offset_ns: int | None) -> str:
    """The CSV text; `offset_ns` maps the samples' monotonic stamps onto the result
    file's wall clock (None: each sample's own wall-clock reading)."""
    index: dict[tuple[int, str], int] = {}
    for source, one in enumerate(series):
        seen = {gpu for s in one.samples if s.readings for gpu in s.readings}
        for gpu in gpu_ids(seen):
            index[(source, gpu)] = len(index)
    rows: list[tuple[int, int, str]] = []
    for source, one in enumerate(series):
        for sample in one.samples:
            if not sample.readings:
                continue
            unix_ns = sample.mono_ns + offset_ns if offset_ns is not None else sample.unix_ns
            for gpu, reading in sample.readings.items():
                if reading.power_w is None:
                    continue
                line = (
                    f"{unix_ns / 1e9:.6f}, {index[(source, gpu)]}, {reading.uuid or ''}, "
                    f"{reading.power_w:.3f} W\n"
                )
                rows.append((unix_ns, index[(source, gpu)], line))
    out = io.StringIO()
    out.write(HEADER)
    for _, _, line in sorted(rows):
        out.write(line)
    return out.getvalue()


def point_gpu_power_csv(series: Sequence[PowerSeries], records: Sequence[RequestRecord]) -> str:
    """The point's CSV on its result file's timeline (its requests' clock pairs)."""
    return gpu_power_csv(series, mono_to_unix_ns([(r.start_ns, r.sent_unix) for r in records]))
