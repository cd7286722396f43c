"""Terminal rendering of a Report (rich renderables; the CLI prints them)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from macs_audit.report import Report

# (key, label, shown as percent?) for the clean-metrics table.
CLEAN_ROWS = [
    ("accuracy", "accuracy", True),
    ("ece", "ECE (15 bins)", True),
    ("mce", "MCE", True),
    ("adaptive_ece", "adaptive ECE", True),
    ("classwise_ece", "classwise ECE", True),
    ("nll", "NLL (nats)", False),
    ("brier", "Brier", False),
    ("mean_confidence", "mean confidence", True),
    ("mean_margin", "mean logit margin", False),
    ("frac_margin_below_target", "margin < target", True),
    ("mean_logit_norm", "mean ||z||_2", False),
    ("mean_max_logit", "mean max logit", False),
]


def fmt(value: float | None, percent: bool) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.2f}%" if percent else f"{value:.4f}"


def clean_table(report: Report) -> Table:
    m, ci = report.clean.metrics, report.clean.intervals
    table = Table(title=f"Calibration audit: {report.model.get('path', '?')} on {report.data.get('source', '?')} "
                        f"(n={m['n']:,})", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    for key, label, percent in CLEAN_ROWS:
        if key not in m:
            continue
        interval = ci.get(key)
        ci_text = f"[{fmt(interval[0], percent)}, {fmt(interval[1], percent)}]" if interval else ""
        table.add_row(label, fmt(m[key], percent), ci_text)
    return table


def temperature_table(report: Report) -> Table | None:
    ts = report.temperature_scaling
    if not ts:
        return None
    table = Table(title=f"Temperature scaling: T = {ts['temperature']:.3f} fitted on {ts['n_fit']:,} held-out images, "
                        f"scored on the other {ts['n_eval']:,}", title_justify="left")
    table.add_column("metric")
    table.add_column("raw", justify="right")
    table.add_column("scaled", justify="right")
    for key, label, percent in (("ece", "ECE", True), ("adaptive_ece", "adaptive ECE", True),
                                ("nll", "NLL", False), ("brier", "Brier", False)):
        table.add_row(label, fmt(ts["raw"][key], percent), fmt(ts["scaled"][key], percent))
    return table


def render(report: Report) -> Group:
    parts = [clean_table(report)]
    ts = temperature_table(report)
    if ts is not None:
        parts.append(ts)
    parts.append(Text(f"model: {report.model.get('format')} via {report.runtime.get('provider')} on "
                      f"{report.runtime.get('device')}; output {report.model.get('output')}", style="dim"))
    return Group(*parts)
