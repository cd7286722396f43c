"""Markdown format: short enough for a pull-request comment or a GitHub Actions step summary.

The verdict comes first, then the gate table, then the report's sections (formats/layout.py) in
order; conventions go in a collapsed <details> block. Every string taken from the report is escaped:
GitHub renders inline HTML, and a `|` in a class name or path would break a table; unprintable
characters (an ESC, a line break) are written as their escapes first (macs_audit.text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from macs_audit.formats import layout, tables
from macs_audit.report import Report
from macs_audit.text import printable

if TYPE_CHECKING:
    from macs_audit.compare import Comparison
    from macs_audit.gating import GateResult

# HTML-significant characters become entities; Markdown-significant ones get a backslash.
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", **{c: "\\" + c for c in "\\`*_[]|#!~"}}


def esc(text: object) -> str:
    """Escape Markdown and inline HTML so report strings render as plain text, on one line."""
    return "".join(_ESCAPES.get(ch, ch) for ch in printable(text))


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str | None = None) -> list[str]:
    """A pipe table; `align` is one letter per column, l or r (default: first left, others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = [
        "| " + " | ".join(esc(h) for h in header) + " |",
        "|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|",
    ]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return lines


def _gate_lines(gate: GateResult) -> list[str]:
    rows = tables.gate_rows(gate)
    basis = "pessimistic end of the 95% bootstrap interval where one exists" if gate.use_interval else "point estimates"
    lines = [
        "### Gate",
        "",
        f"Values compared: {basis}. "
        f"Config: {esc(gate.config or '-')}" + (f"; baseline: {esc(gate.baseline)}" if gate.baseline else "") + ".",
        "",
    ]
    header = ["", "check", "metric", "observed", "threshold", "detail"]
    lines += ["| " + " | ".join(header) + " |", "|:---:|:---|:---|---:|---:|:---|"]
    for status, name, metric, observed, bound, detail in rows:
        mark = "✅" if status == "PASS" else "❌"
        cells = [esc(name), esc(metric), esc(observed), esc(bound), esc(detail)]
        if status != "PASS":
            cells = [f"**{c}**" if c else c for c in cells[:4]] + cells[4:]
        lines.append(f"| {mark} | " + " | ".join(cells) + " |")
    return lines + [""]


def _section_lines(section: layout.Part, content: layout.Content) -> list[str]:
    """A heading, the caption, each table with its note; nothing for a section with no table."""
    if not content.tables:
        return []
    lines = [f"### {esc(section.heading(content))}", ""]
    if content.caption:
        lines += [esc(content.caption), ""]
    for t in content.tables:
        lines += table(t.header, t.rows, "l" * t.text_columns + "r" * (len(t.header) - t.text_columns)) + [""]
        if t.note:
            lines += [esc(t.note), ""]
    return lines


def _summary_lines(report: Report, gate: GateResult | None) -> list[str]:
    """The audit's bottom line (formats/summary.py) as a list: findings, bad ones in bold, then the fixes and
    the notes; the audit's own verdict where no gate ran (the heading holds the gate's)."""
    from macs_audit.formats.summary import summarize

    found = summarize(report)
    lines = [] if gate is not None else [f"**{esc(found.verdict)}**", ""]
    for f in found.findings:
        value = f"**{esc(f.value)}**" if f.bad else esc(f.value)
        lines.append(f"- {esc(f.label)}: {value}")
    # A command in a code span: a report's backtick (in a model path) would end it, and HTML in it is inert.
    lines += [f"- fix: {esc(fix.what)}: `{printable(fix.command).replace('`', chr(39))}`" for fix in found.fixes]
    lines += [f"- ⚠️ {esc(note)}" for note in found.notes]
    return lines + [""]


def render(report: Report, gate: GateResult | None = None) -> str:
    lines = []
    if gate is not None:
        icon = "✅" if gate.passed else "❌"
        lines += [f"## {icon} macs-audit {esc(tables.gate_verdict(gate))}", ""]
    else:
        lines += ["## macs-audit calibration audit", ""]
    lines += [" · ".join(f"**{esc(k)}**: {esc(v)}" for k, v in tables.header_rows(report) if k != "sha256"), ""]
    lines += _summary_lines(report, gate)
    if gate is not None:
        lines += _gate_lines(gate)

    for section, content in layout.present(report):
        lines += _section_lines(section, content)

    lines += ["<details><summary>Conventions</summary>", ""]
    lines += table(["convention", "value"], tables.convention_rows(report), "ll") + ["", "</details>", ""]
    return "\n".join(lines)


def render_comparison(comparison: Comparison) -> str:
    from macs_audit.compare import RULE

    icon = "⚠️" if comparison.regressions else "ℹ️" if comparison.worse else "✅"
    lines = [
        f"## {icon} macs-audit compare: {esc(comparison.headline)}",
        "",
        f"**A** ({esc(comparison.a_name)}): {esc(tables.title(comparison.a))}  ",
        f"**B** ({esc(comparison.b_name)}): {esc(tables.title(comparison.b))}",
        "",
    ]
    for note in comparison.notes:
        lines.append(f"> ⚠️ {esc(note)}")
    if comparison.notes:
        lines.append("")
    lines += ["| section | metric | A | B | B - A | |", "|:---|:---|---:|---:|---:|:---:|"]
    marks = {"better": "🟢 better", "worse": "🔴 **worse**", "same": "same", "changed": "changed", "missing": "-"}
    for section, label, va, vb, delta, status in tables.comparison_rows(comparison):
        cells = [esc(section), esc(label), esc(va), esc(vb), esc(delta)]
        if status == "worse":
            cells[1], cells[4] = f"**{cells[1]}**", f"**{cells[4]}**"
        lines.append("| " + " | ".join(cells) + f" | {marks[status]} |")
    lines += [
        "",
        f"pp: percentage points. {RULE}; `macs-audit gate --baseline` applies thresholds to them.",
        "",
    ]
    return "\n".join(lines)
