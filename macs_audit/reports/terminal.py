"""Terminal format: rich tables for the console (`renderable`, `comparison_table`, `gate_table`), and
their plain text (`render`, `render_comparison`) for a file."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from macs_audit.metrics.registry import METRICS
from macs_audit.report import Report
from macs_audit.reports import tables
from macs_audit.reports.tables import fmt

if TYPE_CHECKING:
    from macs_audit.compare import Comparison
    from macs_audit.gate import GateResult

WIDTH = 120  # of the plain text written to files


def clean_table(report: Report) -> Table:
    # Titles go through rich markup: escape paths, which may contain [brackets].
    table = Table(
        title=escape(
            f"Calibration audit: {tables.shown(report.model.path)} on "
            f"{tables.shown(report.data.source)} (n={report.clean.metrics['n']:,})"
        ),
        title_justify="left",
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("95% CI", justify="right")
    for row in tables.clean_rows(report):
        table.add_row(*row)
    return table


def temperature_table(report: Report) -> Table | None:
    ts, section = report.temperature_scaling, tables.temperature_rows(report)
    if ts is None or section is None:
        return None
    table = Table(
        title=f"Temperature scaling: T = {ts.temperature:.3f} fitted on {tables.shown(ts.n_fit, 0):,} "
        f"held-out images, scored on the other {tables.shown(ts.n_eval, 0):,}",
        title_justify="left",
    )
    table.add_column("metric")
    table.add_column("raw", justify="right")
    table.add_column("scaled", justify="right")
    for row in section[1]:
        table.add_row(*row)
    return table


def robustness_table(report: Report) -> Table | None:
    """Perturbation views side by side with clean, plus sensitivity and the margin-to-sensitivity ratio."""
    views = report.views_of("perturbation")
    rob = report.robustness
    if not views and not rob:
        return None
    table = Table(title="Robustness", title_justify="left")
    name, *labels = tables.view_header()
    table.add_column(name)
    for label in labels:
        table.add_column(label, justify="right")
    for view in [report.clean] + views:
        table.add_row(*tables.view_row(view))
    sens = rob.sensitivity if rob is not None else None
    if rob is not None and sens is not None:
        ratio, radius, lipschitz = METRICS["robustness_ratio"], METRICS["median_flip_radius"], METRICS["lipschitz"]
        error = f" +- {sens.lipschitz_error:.3f}" if sens.lipschitz_error else ""
        method = str(tables.shown(sens.method)).split(" (")[0]
        table.caption = (
            f"{lipschitz.label} = {sens.lipschitz:.3f}{error} ({method}, n={sens.n}); "
            f"margin / L^ = {fmt(rob.robustness_ratio, ratio.percent)}; "
            f"{radius.label} {fmt(rob.median_flip_radius, radius.percent)} ({radius.note})"
        )
        table.caption_justify = "left"
    return table


def _heat(value: float) -> str:
    """Background colour from red (0% accuracy) through yellow to green (100%)."""
    red = int(255 * min(1.0, 2 * (1 - value)))
    green = int(255 * min(1.0, 2 * value))
    return f"black on rgb({red},{green},60)"


def corruption_table(report: Report) -> Table | None:
    """Corruption x severity heat table of accuracy, with per-corruption mean accuracy and ECE."""
    summary = report.corruption_summary
    if not summary:
        return None
    accuracy, ece = METRICS["accuracy"], METRICS["ece"]
    severities = summary.severities
    cells = {(v.corruption, v.severity): v.metrics for v in report.views_of("corruption")}
    table = Table(
        title=escape(f"CIFAR-C accuracy by corruption and severity ({summary.source or ''})"), title_justify="left"
    )
    table.add_column("family")
    table.add_column("corruption")
    for s in severities:
        table.add_column(f"s{s}", justify="right")
    table.add_column("mean acc", justify="right")
    table.add_column(f"mean {ece.label}", justify="right")
    for name, c in summary.corruptions.items():
        row: list[str | Text] = [c.family, name + (" *" if c.extra else "")]
        for s in severities:
            m = cells.get((name, s))
            row.append(Text(f"{100 * m['accuracy']:.1f}", style=_heat(m["accuracy"])) if m else Text("-"))
        row += [fmt(c.accuracy, accuracy.percent), fmt(c.ece, ece.percent)]
        table.add_row(*row)
    notes = ["* extra corruption (not in the 15-corruption benchmark)"]
    for count, mean_accuracy, mean_ece in (
        ("15", "corruption_accuracy", "corruption_ece"),
        ("19", "corruption_accuracy_19", "corruption_ece_19"),
    ):
        acc_value = getattr(summary, METRICS[mean_accuracy].report_key)
        ece_value = getattr(summary, METRICS[mean_ece].report_key)
        if acc_value is not None:
            notes.append(
                f"mean over {count}x{len(severities)}: {accuracy.label} {fmt(acc_value, accuracy.percent)}, "
                f"{ece.label} {fmt(ece_value, ece.percent)}"
            )
    if summary.mce_unnormalized is not None:
        notes.append(f"{METRICS['mce_unnormalized'].label} {100 * summary.mce_unnormalized:.2f}")
    if summary.mce is not None:
        relative = METRICS["relative_mce"]
        notes.append(
            f"mCE vs baseline {100 * summary.mce:.1f}%, {relative.label} {fmt(summary.relative_mce, relative.percent)}"
        )
    table.caption = "; ".join(notes)
    table.caption_justify = "left"
    return table


def renderable(report: Report, gate: GateResult | None = None) -> Group:
    """The report's tables, then the gate table if given."""
    parts: list[RenderableType] = [clean_table(report)]
    for extra in (temperature_table(report), robustness_table(report), corruption_table(report)):
        if extra is not None:
            parts.append(extra)
    parts.append(
        Text(
            f"model: {report.model.format} via {report.runtime.provider} on "
            f"{report.runtime.device}; output {report.model.output}",
            style="dim",
        )
    )
    if gate is not None:
        return Group(Group(*parts), gate_table(gate))
    return Group(*parts)


def gate_table(gate: GateResult) -> Table:
    basis = "95% CI pessimistic end" if gate.use_interval else "point estimates"
    style = "bold green" if gate.passed else "bold red"
    table = Table(title=Text(f"{tables.gate_verdict(gate)} ({basis})", style=style), title_justify="left")
    table.add_column("")
    table.add_column("check", no_wrap=True)  # the config key: keep it whole so it can be searched for
    table.add_column("metric")
    table.add_column("observed", justify="right", no_wrap=True)
    table.add_column("threshold", justify="right", no_wrap=True)
    table.add_column("detail")
    for status, *cells in tables.gate_rows(gate):
        style = "green" if status == "PASS" else "bold red"
        table.add_row(Text(status, style=style), *(Text(c) for c in cells))
    return table


def comparison_table(comparison: Comparison) -> Group:
    n = len(comparison.regressions)
    title = f"A = {comparison.a_name}, B = {comparison.b_name}: {n} regression{'s' * (n != 1)}"
    table = Table(title=Text(title, style="bold red" if n else "bold green"), title_justify="left")
    for name, justify in (
        ("section", "left"),
        ("metric", "left"),
        ("A", "right"),
        ("B", "right"),
        ("B - A", "right"),
        ("", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    styles = {"worse": "bold red", "better": "green"}
    for section, label, va, vb, delta, status in tables.comparison_rows(comparison):
        style = styles.get(status, "")
        table.add_row(
            Text(section), Text(label), Text(va), Text(vb), Text(delta, style=style), Text(status, style=style or "dim")
        )
    notes = [Text(f"note: {note}", style="yellow") for note in comparison.notes]
    return Group(table, *notes)


def render(report: Report, gate: GateResult | None = None) -> str:
    return to_text(renderable(report, gate))


def render_comparison(comparison: Comparison) -> str:
    return to_text(comparison_table(comparison))


def to_text(content: RenderableType, width: int = WIDTH) -> str:
    """Plain text of a rich renderable (for --format terminal written to a file)."""
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(content)
    return console.export_text()
