"""The report's disaggregated lanes (metrics/compare_disagg.py): per concurrency, the
TTFT parts side by side as one stacked bar per lane (the client's mean TTFT marked over
it), the parts and each role's server figures as tables whose cells carry their exact
values, and which lane wins on throughput and on TTFT."""

from __future__ import annotations

import html
from typing import Any

from loadgen.metrics.compare_disagg import PART_NAMES, DisaggComparison
from loadgen.sinks.compare_disagg_text import ROLE_SHOWN
from loadgen.sinks.report_figures import _data_uri, _figure

PART_COLOURS = ("#7f7f7f", "#bcbd22", "#1f77b4", "#d62728", "#2ca02c", "#e0e0e0")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: float | None, digits: int, name: str) -> str:
    shown = "-" if value is None else f"{value:,.{digits}f}"
    data = "" if value is None else f' data-value="{value!r}"'
    return f'<td class=num data-field="{_e(name)}"{data}>{shown}</td>'


def parts_figure(disagg: DisaggComparison) -> str | None:
    """One panel per concurrency, one stacked bar per lane: its parts' means in TTFT's
    order (a null part draws nothing; a negative unexplained part is drawn below 0), and
    the client's mean TTFT as a black tick."""
    columns = len(disagg.concs)
    figure = _figure(max(4.0, 2.2 * columns + 1.5), 4.2)
    if figure is None:
        return None
    axes_list = figure.subplots(1, columns, sharey=True, squeeze=False)[0]
    for axes, conc in zip(axes_list, disagg.concs, strict=True):
        lanes = disagg.lanes_at(conc)
        names = [lane.run for lane in lanes]
        up = [0.0] * len(lanes)
        down = [0.0] * len(lanes)
        for part, part_colour in zip(PART_NAMES, PART_COLOURS, strict=True):
            values = [lane.parts.get(part) or 0.0 for lane in lanes]
            bottoms = [d if v < 0 else u for v, u, d in zip(values, up, down, strict=True)]
            axes.bar(names, values, bottom=bottoms, color=part_colour, label=part, width=0.6)
            up = [u + max(v, 0.0) for u, v in zip(up, values, strict=True)]
            down = [d + min(v, 0.0) for d, v in zip(down, values, strict=True)]
        for index, lane in enumerate(lanes):
            if lane.client_mean_ttft_ms is not None:
                axes.hlines(lane.client_mean_ttft_ms, index - 0.35, index + 0.35, color="black")
        axes.set_title(f"conc {conc}", fontsize=9)
        axes.tick_params(axis="x", labelrotation=30, labelsize=8)
        axes.grid(True, axis="y", alpha=0.3)
    axes_list[0].set_ylabel("mean TTFT part (ms); black: client mean TTFT")
    handles, labels = axes_list[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside right upper", fontsize=8)
    return _data_uri(figure)


def _img(uri: str | None) -> str:
    if uri is None:
        return "<p>(figures need matplotlib: <code>pip install 'loadgen[plot]'</code>)</p>"
    return f'<img alt="TTFT parts per lane and concurrency" src="{uri}">'


def disagg_sections(disagg: DisaggComparison | None) -> list[tuple[str, str, str]]:
    """The report's section (key, title, HTML) when a lane was read per role, else none."""
    if disagg is None:
        return []
    return [("disagg", "Disaggregated lanes: TTFT parts and roles", disagg_section(disagg))]


def disagg_section(disagg: DisaggComparison) -> str:
    head = "".join(f"<th>{_e(p)}</th>" for p in PART_NAMES)
    role_head = "".join(f"<th>{_e(short)}</th>" for _, short, _ in ROLE_SHOWN)
    out = [_img(parts_figure(disagg))]
    for conc in disagg.concs:
        parts_rows, role_rows = [], []
        for lane in disagg.lanes_at(conc):
            cells = "".join(_num(lane.parts.get(p), 1, f"{p}_ms") for p in PART_NAMES)
            parts_rows.append(
                f'<tr data-run="{_e(lane.run)}"><th>{_e(lane.run)}</th>{cells}'
                f"{_num(lane.client_mean_ttft_ms, 1, 'client_mean_ttft_ms')}"
                f"<td>{_e(lane.parts_verdict or '-')}</td></tr>"
            )
            for role, figures in lane.roles.items():
                cells = "".join(_num(figures.get(k), d, k) for k, _, d in ROLE_SHOWN)
                role_rows.append(
                    f'<tr data-run="{_e(lane.run)}" data-role="{_e(role)}">'
                    f"<th>{_e(lane.run)}</th><td>{_e(role)}</td>{cells}</tr>"
                )
        winners = "".join(f"<li>{_e(w.sentence)}</li>" for w in disagg.winners_at(conc))
        out.append(
            f'<h3>conc {conc}</h3><ul class="winners" data-conc="{conc}">{winners}</ul>'
            f'<div class="wide"><table class="ttft-parts" data-conc="{conc}"><tr><th>lane</th>'
            f"{head}<th>client TTFT</th><th>adds up</th></tr>{''.join(parts_rows)}</table>"
            f'<table class="roles" data-conc="{conc}"><tr><th>lane</th><th>role</th>'
            f"{role_head}</tr>{''.join(role_rows)}</table></div>"
        )
    return "".join(out)
