"""Terminal rendering of a Report (rich renderables; the CLI prints them)."""

from __future__ import annotations

from rich.console import Group
from rich.markup import escape
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
    # Titles go through rich markup: escape paths, which may contain [brackets].
    table = Table(title=escape(f"Calibration audit: {report.model.get('path', '?')} on {report.data.get('source', '?')} "
                               f"(n={m['n']:,})"), title_justify="left")
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


def robustness_table(report: Report) -> Table | None:
    """Perturbation views side by side with clean, plus sensitivity and the margin-to-sensitivity ratio."""
    views = [v for v in report.views if v.kind == "perturbation"]
    rob = report.robustness or {}
    if not views and not rob:
        return None
    table = Table(title="Robustness", title_justify="left")
    table.add_column("view")
    for label in ("accuracy", "ECE", "NLL", "Brier"):
        table.add_column(label, justify="right")
    for v in [report.clean] + views:
        m = v.metrics
        table.add_row(v.name, fmt(m["accuracy"], True), fmt(m["ece"], True), fmt(m["nll"], False), fmt(m["brier"], False))
    sens = rob.get("sensitivity")
    if sens:
        error = f" +- {sens['lipschitz_error']:.3f}" if sens.get("lipschitz_error") else ""
        table.caption = (f"sensitivity L^ = {sens['lipschitz']:.3f}{error} ({sens['method'].split(' (')[0]}, n={sens['n']}); "
                         f"margin / L^ = {fmt(rob.get('robustness_ratio'), False)}; "
                         f"median flip radius {fmt(rob.get('median_flip_radius'), False)} (pixel L2)")
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
    severities = summary["severities"]
    cells = {(v.corruption, v.severity): v.metrics for v in report.views if v.kind == "corruption"}
    table = Table(title=escape(f"CIFAR-C accuracy by corruption and severity ({summary.get('source', '')})"),
                  title_justify="left")
    table.add_column("family")
    table.add_column("corruption")
    for s in severities:
        table.add_column(f"s{s}", justify="right")
    table.add_column("mean acc", justify="right")
    table.add_column("mean ECE", justify="right")
    for name, c in summary["corruptions"].items():
        row = [c["family"], name + (" *" if c["extra"] else "")]
        for s in severities:
            m = cells.get((name, s))
            row.append(Text(f"{100 * m['accuracy']:.1f}", style=_heat(m["accuracy"])) if m else Text("-"))
        row += [fmt(c["accuracy"], True), fmt(c["ece"], True)]
        table.add_row(*row)
    notes = ["* extra corruption (not in the 15-corruption benchmark)"]
    for label in ("15", "19"):
        if f"mean_accuracy_{label}" in summary:
            notes.append(f"mean over {label}x{len(severities)}: accuracy {fmt(summary[f'mean_accuracy_{label}'], True)}, "
                         f"ECE {fmt(summary[f'mean_ece_{label}'], True)}")
    if "mce_unnormalized" in summary:
        notes.append(f"unnormalised mCE {100 * summary['mce_unnormalized']:.2f}")
    if summary.get("mce") is not None:
        notes.append(f"mCE vs baseline {100 * summary['mce']:.1f}%, relative mCE {fmt(summary.get('relative_mce'), False)}")
    table.caption = "; ".join(notes)
    table.caption_justify = "left"
    return table


def render(report: Report) -> Group:
    parts = [clean_table(report)]
    for extra in (temperature_table(report), robustness_table(report), corruption_table(report)):
        if extra is not None:
            parts.append(extra)
    parts.append(Text(f"model: {report.model.get('format')} via {report.runtime.get('provider')} on "
                      f"{report.runtime.get('device')}; output {report.model.get('output')}", style="dim"))
    return Group(*parts)


# --------------------------------------------------------------------------------------------
# Gate and comparison tables (used by `gate`, `report` and `compare`).
# Imports are local: tables imports this module for CLEAN_ROWS and fmt.
# --------------------------------------------------------------------------------------------

def gate_table(gate) -> Table:
    from macs_audit.reports.tables import gate_rows, gate_verdict

    basis = "95% CI pessimistic end" if gate.use_interval else "point estimates"
    table = Table(title=Text(f"{gate_verdict(gate)} ({basis})", style="bold green" if gate.passed else "bold red"),
                  title_justify="left")
    table.add_column("")
    table.add_column("check", no_wrap=True)  # the config key: keep it whole so it can be searched for
    table.add_column("metric")
    table.add_column("observed", justify="right", no_wrap=True)
    table.add_column("threshold", justify="right", no_wrap=True)
    table.add_column("detail")
    for status, *cells in gate_rows(gate):
        style = "green" if status == "PASS" else "bold red"
        table.add_row(Text(status, style=style), *(Text(c) for c in cells))
    return table


def render_all(report: Report, gate=None) -> Group:
    """The report as `render` shows it, then the gate table if given."""
    return Group(render(report), gate_table(gate)) if gate is not None else render(report)


def comparison_table(comparison) -> Group:
    from macs_audit.reports.tables import comparison_rows

    n = len(comparison.regressions)
    title = f"A = {comparison.a_name}, B = {comparison.b_name}: {n} regression{'s' * (n != 1)}"
    table = Table(title=Text(title, style="bold red" if n else "bold green"), title_justify="left")
    for name, justify in (("section", "left"), ("metric", "left"), ("A", "right"), ("B", "right"),
                          ("B - A", "right"), ("", "left")):
        table.add_column(name, justify=justify)
    styles = {"worse": "bold red", "better": "green"}
    for section, label, va, vb, delta, status in comparison_rows(comparison):
        style = styles.get(status, "")
        table.add_row(Text(section), Text(label), Text(va), Text(vb), Text(delta, style=style),
                      Text(status, style=style or "dim"))
    notes = [Text(f"note: {note}", style="yellow") for note in comparison.notes]
    return Group(table, *notes)


def to_text(renderable, width: int = 120) -> str:
    """Plain text of a rich renderable (for --format terminal written to a file)."""
    from rich.console import Console

    console = Console(width=width, record=True, file=_NullFile(), color_system=None)
    console.print(renderable)
    return console.export_text()


class _NullFile:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass
