"""Terminal format: rich tables for the console (`renderable`, `comparison_table`, `gate_table`), and
their plain text (`render`, `render_comparison`) for a file."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from macs_audit.formats import layout, summary, tables
from macs_audit.metrics.registry import METRICS
from macs_audit.numbers import format_value
from macs_audit.report import Calibrators, Report
from macs_audit.text import printable

if TYPE_CHECKING:
    from macs_audit.compare import Comparison
    from macs_audit.gating import GateResult

WIDTH = 120  # of the plain text written to files


def _text(value: object, style: str = "") -> Text:
    """A string for the console: never read as rich markup (a class named `[red]x` shows as written), its
    unprintable characters escaped (macs_audit.text: an ESC from a report never reaches the terminal).
    Every string this module hands rich goes through it."""
    return value if isinstance(value, Text) else Text(printable(value), style=style)


def _grid(title: str | None, table: layout.Table, whole: bool = False) -> Table:
    """A section's table: its text columns left, its numbers right; `whole`: the first column's names unwrapped."""
    out = Table(title=None if title is None else _text(title), title_justify="left")
    for i, name in enumerate(table.header):
        out.add_column(name, justify="left" if i < table.text_columns else "right", no_wrap=whole and i == 0)
    for row in table.rows:
        out.add_row(*map(_text, row))
    if table.note:
        out.caption, out.caption_justify = _text(table.note), "left"
    return out


# The sections whose first column holds names to keep whole (a method's name, its `*` beside it).
WHOLE = {"calibrators"}


def section_tables(section: layout.Part, content: layout.Content) -> list[Table]:
    """A section's tables, the first titled with its heading and caption (none for a section with no table)."""
    heading = section.heading(content) + (f": {content.caption}" if content.caption else "")
    whole = section.key in WHOLE
    return [_grid(heading if i == 0 else None, t, whole) for i, t in enumerate(content.tables)]


def calibrator_comparison_table(calibrators: Calibrators) -> Table:
    """The post-hoc calibrators side by side (the audit's section, or `calibrate --method all`'s choice)."""
    (table,) = section_tables(layout.section("calibrators"), layout.calibrator_content(calibrators))
    return table


def robustness_table(report: Report, title: str) -> Table | None:
    """Perturbation views side by side with clean, plus sensitivity and the margin-to-sensitivity ratio."""
    views = report.views_of("perturbation")
    rob = report.robustness
    if not views and not rob:
        return None
    table = Table(title=_text(title), title_justify="left")
    name, *labels = tables.view_header()
    table.add_column(name)
    for label in labels:
        table.add_column(label, justify="right")
    for view in [report.clean] + views:
        table.add_row(*map(_text, tables.view_row(view)))
    sens = rob.sensitivity if rob is not None else None
    if rob is not None and sens is not None:
        ratio, radius = METRICS["robustness_ratio"], METRICS["median_flip_radius"]
        gradient_norm = METRICS["mean_gradient_norm"]
        error = f" +- {sens.mean_gradient_norm_error:.3f}" if sens.mean_gradient_norm_error else ""
        if sens.mean_gradient_norm_error is None and sens.mean_gradient_norm_error_note:
            error = f" +- n/a ({sens.mean_gradient_norm_error_note})"
        method = str(tables.shown(sens.method)).split(" (")[0]
        table.caption = _text(
            f"{gradient_norm.label} = {sens.mean_gradient_norm:.3f}{error}, {gradient_norm.note} "
            f"({method}, n={sens.n}); "
            f"margin / L^ = {format_value(rob.robustness_ratio, ratio.percent)}; "
            f"{radius.label} {format_value(rob.median_flip_radius, radius.percent)} ({radius.note})"
        )
        table.caption_justify = "left"
    return table


class Fitted:
    """The first of several layouts of one table whose narrowest rendering fits the console's width (with
    `unwrapped`: whose widest, so that no cell wraps): a log at 80 columns gets a compact layout instead of
    names cut to `gaussian…`. The last layout is used when none fits. Each layout keeps names whole (their
    columns do not wrap)."""

    def __init__(self, *layouts: RenderableType, unwrapped: bool = False):
        self.layouts, self.unwrapped = layouts, unwrapped

    def choose(self, console: Console, options: ConsoleOptions) -> RenderableType:
        unbounded = options.update_width(100_000)  # a measurement is clamped to the width it is given
        for choice in self.layouts[:-1]:
            needs = Measurement.get(console, unbounded, choice)
            if (needs.maximum if self.unwrapped else needs.minimum) <= options.max_width:
                return choice
        return self.layouts[-1]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.choose(console, options)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.choose(console, options))


def compact(table: Table) -> Table:
    """`table` restyled for narrow consoles: a rule under the header, no outer edge, one space between cells."""
    table.box = box.SIMPLE_HEAD
    table.show_edge = False
    table.pad_edge = False
    table.collapse_padding = True
    return table


def titled(table: RenderableType) -> RenderableType:
    """A table with its title above it and its caption below as lines of the console's width (rich wraps
    them to the table's own width)."""
    if not isinstance(table, Table) or (table.title is None and table.caption is None):
        return table
    title, caption = table.title, table.caption
    table.title = table.caption = None

    def line(text: str | Text, style: str) -> Text:
        text = _text(text).copy()
        text.stylize(style)
        return text

    parts: list[RenderableType] = [table]
    if title is not None:
        parts.insert(0, line(title, "italic"))
    if caption is not None:
        parts.append(line(caption, "dim"))
    return Group(*parts)


def _heat(value: float) -> str:
    """Background colour from red (0% accuracy) through yellow to green (100%)."""
    red = int(255 * min(1.0, 2 * (1 - value)))
    green = int(255 * min(1.0, 2 * value))
    return f"black on rgb({red},{green},60)"


def corruption_table(report: Report, title: str) -> RenderableType | None:
    """Corruption x severity heat table of accuracy, with per-corruption mean accuracy and ECE; its notes below.

    Three layouts, the first that fits: the boxed table (about 95 columns for the 19 corruptions), the compact
    one (about 75: `acc` and `ECE` headers, stated in its caption), and one line per corruption."""
    summary = report.corruption_summary
    if not summary:
        return None
    accuracy, ece = METRICS["accuracy"], METRICS["ece"]
    severities = summary.severities
    # accuracy of each grid cell the report has (a view without one shows as not run)
    cells = {
        (v.corruption, v.severity): v.metrics["accuracy"]
        for v in report.views_of("corruption")
        if "accuracy" in v.metrics
    }

    def grid(mean_acc: str, mean_ece: str) -> Table:
        table = Table()
        table.add_column("family", no_wrap=True)
        table.add_column("corruption", no_wrap=True)
        for s in severities:
            table.add_column(f"s{s}", justify="right", no_wrap=True)
        table.add_column(mean_acc, justify="right", no_wrap=True)
        table.add_column(mean_ece, justify="right", no_wrap=True)
        for name, c in summary.corruptions.items():
            row = [_text(c.family), _text(name + (" *" if c.extra else ""))]
            for s in severities:
                value = cells.get((name, s))
                row.append(Text("-") if value is None else Text(f"{100 * value:.1f}", style=_heat(value)))
            row += [_text(format_value(c.accuracy, accuracy.percent)), _text(format_value(c.ece, ece.percent))]
            table.add_row(*row)
        return table

    narrow = compact(grid("acc", ece.label))
    span = f"s{severities[0]}-s{severities[-1]}: " if severities else ""
    narrow.caption = _text(f"{span}accuracy (%) by severity; acc, {ece.label}: mean over them")
    narrow.caption_justify = "left"
    lines = []
    for name, c in summary.corruptions.items():
        values = " ".join(f"{100 * cells[(name, s)]:.1f}" if (name, s) in cells else "-" for s in severities)
        lines.append(
            _text(
                f"{name}{' *' if c.extra else ''} ({c.family}): {values}; mean {accuracy.label} "
                f"{format_value(c.accuracy, accuracy.percent)}, {ece.label} {format_value(c.ece, ece.percent)}"
            )
        )
    notes = ["* extra corruption (not in the 15-corruption benchmark)"]
    for count, mean_accuracy, mean_ece in (
        ("15", "corruption_accuracy", "corruption_ece"),
        ("19", "corruption_accuracy_19", "corruption_ece_19"),
    ):
        acc_value = getattr(summary, METRICS[mean_accuracy].report_key)
        ece_value = getattr(summary, METRICS[mean_ece].report_key)
        if acc_value is not None:
            notes.append(
                f"mean over {count}x{len(severities)}: {accuracy.label} {format_value(acc_value, accuracy.percent)}, "
                f"{ece.label} {format_value(ece_value, ece.percent)}"
            )
    if summary.mean_corruption_error_unnormalized is not None:
        unnormalized = METRICS["mean_corruption_error_unnormalized"]
        notes.append(f"{unnormalized.label} {100 * summary.mean_corruption_error_unnormalized:.2f}")
    if summary.mean_corruption_error is not None:
        relative = METRICS["relative_mean_corruption_error"]
        notes.append(
            f"mCE vs baseline {100 * summary.mean_corruption_error:.1f}%, "
            f"{relative.label} {format_value(summary.relative_mean_corruption_error, relative.percent)}"
        )
    return Group(
        _text(f"{title}: {summary.source}" if summary.source else title, style="italic"),
        Fitted(grid("mean acc", f"mean {ece.label}"), narrow, Group(*lines)),
        *(_text(note, style="dim") for note in notes),
    )


def _section(report: Report, section: layout.Part, content: layout.Content) -> list[RenderableType]:
    return list(section_tables(section, content))


def _robustness(report: Report, section: layout.Part, content: layout.Content) -> list[RenderableType]:
    table = robustness_table(report, section.title)
    return [] if table is None else [table]


def _corruptions(report: Report, section: layout.Part, content: layout.Content) -> list[RenderableType]:
    table = corruption_table(report, section.title)
    return [] if table is None else [table]


def _stacked(cell: str) -> Text:
    """'41.35% [36.6, 47.3]' as the value above its interval: a table of four intervals fits 120 columns."""
    value, bracket, interval = cell.partition(" [")
    return _text(value) if not bracket else Text("\n").join([_text(value), _text(bracket.strip() + interval)])


def slice_table(rows: list[list[str]], header: list[str], more: int) -> Fitted:
    """The scored slices: a table with each interval under its value where it fits, else a slice's name on a line
    and its numbers indented under it (the significant ones in bold); `more`: the slices left out, in a note."""
    numbers = range(2, 6)  # the cells that hold a value and its interval
    table = Table()
    for i, name in enumerate(header):
        # The headers' `[95% CI]` is each cell's second line; the numbers kept whole.
        table.add_column(name.removesuffix(" [95% CI]"), justify="left" if i == 0 else "right", no_wrap=i > 0)
    lines: list[RenderableType] = []
    for row in rows:
        style = "bold" if row[-1] else ""
        table.add_row(*(_stacked(c) if i in numbers else _text(c) for i, c in enumerate(row)), style=style)
        values = "; ".join(
            f"{name.removesuffix(' [95% CI]')} {c}" for name, c in zip(header[2:-1], row[2:-1], strict=True)
        )
        lines.append(_text(f"{row[0]} ({row[1]} images{', significant' if row[-1] else ''})", style))
        lines.append(Padding(_text(values), (0, 0, 0, 2), expand=False))
    note = f"{more:,} more in the JSON report" if more else ""
    if note:
        table.caption, table.caption_justify = _text(note), "left"
        lines.append(_text(note, style="dim"))
    return Fitted(table, Group(*lines))


def _slices(report: Report, section: layout.Part, content: layout.Content) -> list[RenderableType]:
    """The scored slices (the worst tables.SLICE_ROWS, slice_table), then the section's other table."""
    heading = section.heading(content) + (f": {content.caption}" if content.caption else "")
    parts: list[RenderableType] = [_text(heading, "italic")]
    others = list(content.tables)
    if report.slices is not None and report.slices.slices:  # the first table: the scored slices
        scored = others.pop(0)
        rows = [list(row) for row in scored.rows]
        parts.append(slice_table(rows[: tables.SLICE_ROWS], list(scored.header), max(0, len(rows) - tables.SLICE_ROWS)))
    return [Group(*parts), *(_grid(None, t) for t in others)]


# The terminal's own renderings, by section key: the views beside clean with the sensitivity under them, the
# corruption grid as a heat table, the slices capped. Every other section shows its tables (section_tables).
RENDERERS: dict[str, Callable[[Report, layout.Part, layout.Content], list[RenderableType]]] = {
    "robustness": _robustness,
    "corruptions": _corruptions,
    "slices": _slices,
}


def summary_block(report: Report) -> Group:
    """The bottom line first (formats/summary.py): a line per finding, its bad values in red (colour only
    where the console has it: never in a log or a file), then what would fix them, with the command."""
    found = summary.summarize(report)
    lines: list[RenderableType] = [_text("Summary", style="bold")]
    for finding in found.findings:
        line = _text(f"  {finding.label}: ")
        line.append(_text(finding.value, style="bold red" if finding.bad else "bold"))
        lines.append(line)
    for fix in found.fixes:
        command = _text(f"    {fix.command}", style="cyan")
        command.no_wrap, command.overflow = True, "ignore"  # whole on one line, to copy: never cut or folded
        lines += [_text(f"  fix: {fix.what}:"), command]
    lines += [_text(f"  note: {note}", style="yellow") for note in found.notes]  # too few images for an estimate
    return Group(*lines)


def verdict_line(report: Report, gate: GateResult | None = None) -> Text:
    """The one line that ends the output: the gate's verdict where a gate ran, else the audit's own."""
    if gate is not None:
        return _text(tables.gate_verdict(gate), style="bold green" if gate.passed else "bold red")
    found = summary.summarize(report)
    line = _text(found.verdict, style="bold red" if found.problems else "bold green")
    line.no_wrap, line.overflow = True, "ignore"  # one line, as logs are searched for it
    return line


def renderable(report: Report, gate: GateResult | None = None, verdict: bool = True) -> Group:
    """The report's heading and its summary block, the sections (formats/layout.py) in order, the model and
    input, the gate table if given, and (`verdict`) the verdict line: the gate's where one ran. `evaluate
    --gate` leaves it off: the gate's verdict follows."""
    parts: list[RenderableType] = [_text(f"Calibration audit: {tables.title(report)}", style="italic")]
    parts.append(summary_block(report))
    for section, content in layout.present(report):
        render = RENDERERS.get(section.key, _section)
        parts += [titled(part) for part in render(report, section, content)]
    parts.append(
        _text(
            f"model: {tables.ran_as(report)}; output {report.model.output}",
            style="dim",
        )
    )
    # The preprocessing applied (marked when it is the CIFAR-10 default nobody chose), and warnings.
    for key, value in tables.header_rows(report):
        if key in ("input", "classes", "checkpoint", "warning"):
            parts.append(_text(f"{key}: {value}", style="bold yellow" if key == "warning" else "dim"))
    if gate is not None:
        parts.append(gate_table(gate))
    if verdict:
        parts.append(verdict_line(report, gate))
    return Group(*parts)


def gate_table(gate: GateResult) -> Group:
    """The verdict, then a row per check: a table where it fits, else two lines per check (the check's
    config key whole on the first)."""
    basis = "95% CI pessimistic end" if gate.use_interval else "point estimates"
    verdict = _text(f"{tables.gate_verdict(gate)} ({basis})", style="bold green" if gate.passed else "bold red")
    rows = tables.gate_rows(gate)
    table = Table()
    table.add_column("")
    table.add_column("check", no_wrap=True)  # the config key: keep it whole so it can be searched for
    table.add_column("metric")
    table.add_column("observed", justify="right", no_wrap=True)
    table.add_column("threshold", justify="right", no_wrap=True)
    table.add_column("detail")
    stacked = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
    stacked.add_column("", no_wrap=True)
    stacked.add_column("check")
    for status, name, metric, observed, threshold, detail in rows:
        style = "green" if status == "PASS" else "bold red"
        table.add_row(Text(status, style=style), *map(_text, (name, metric, observed, threshold, detail)))
        body = _text(f"{name}: {observed} {threshold}")  # the line break added after: _text escapes one
        body.append("\n")
        body.append(printable(f"{metric}; {detail}"), style="dim")
        stacked.add_row(Text(status, style=style), body)
    return Group(verdict, Fitted(table, stacked))


def comparison_table(comparison: Comparison) -> Group:
    """The rows of `compare`: sections in a column where it fits, else the compact layout with a blank line
    between sections (each metric's label names its view)."""
    from macs_audit.compare import RULE

    title = f"A = {comparison.a_name}, B = {comparison.b_name}: {comparison.headline}"
    styles = {"worse": "bold red", "better": "green"}
    rows = tables.comparison_rows(comparison)

    def layout(with_section: bool) -> Table:
        table = Table()
        columns = [("section", "left")] if with_section else []
        columns += [("metric", "left"), ("A", "right"), ("B", "right"), ("B - A", "right"), ("", "left")]
        for name, justify in columns:
            table.add_column(name, justify=justify, no_wrap=name != "metric")  # type: ignore[arg-type]
        for i, (section, label, va, vb, delta, status) in enumerate(rows):
            style = styles.get(status, "")
            cells = [_text(label), _text(va), _text(vb), _text(delta, style), _text(status, style or "dim")]
            last = i + 1 == len(rows) or rows[i + 1][0] != section
            table.add_row(*([_text(section)] if with_section else []), *cells, end_section=last and not with_section)
        return table

    notes = [_text(f"note: {note}", style="yellow") for note in comparison.notes]
    heading = _text(
        title, style="bold red" if comparison.regressions else "bold yellow" if comparison.worse else "bold green"
    )
    rule = _text(f"{RULE}.", style="dim")
    return Group(heading, Fitted(layout(True), compact(layout(False)), unwrapped=True), rule, *notes)


def render(report: Report, gate: GateResult | None = None) -> str:
    return to_text(renderable(report, gate))


def render_comparison(comparison: Comparison) -> str:
    return to_text(comparison_table(comparison))


def to_text(content: RenderableType, width: int = WIDTH) -> str:
    """Plain text of a rich renderable (for --format terminal written to a file)."""
    from rich.console import Console

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(content, crop=False)  # a line kept whole (a command) is longer than the width, never cut
    return console.export_text()
