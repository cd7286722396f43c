"""Pull-request comment format: the gate's verdict and the values that decided it, short enough to read in a review.

A hidden marker (MARKER) comes first, so a later run finds its own comment and edits it (action.yml) instead
of adding one per push; then the verdict line, what was gated, the failed checks (check, value, threshold,
the baseline's value where there is one) and the passing ones, folded. The full report is elsewhere (the
step summary, the uploaded artifact). Every string taken from the report or the config is escaped as
formats/markdown.py escapes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from macs_audit.errors import UsageError
from macs_audit.formats import tables
from macs_audit.formats.markdown import esc, table
from macs_audit.numbers import format_value
from macs_audit.report import Report

if TYPE_CHECKING:
    from macs_audit.compare import Comparison
    from macs_audit.gating import GateResult

MARKER = "<!-- macs-audit-pr-comment -->"
ALIGN = "llrrr"  # check and metric left, the values right


def _check_rows(gate: GateResult) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """The table's header and its rows, the failed checks' and the passing ones' (gate order in each)."""
    header = ["check", "metric", "value", "threshold"]
    with_baseline = any(c.baseline is not None for c in gate.checks)
    if with_baseline:  # the baseline's value beside the candidate's, as the HTML gate table shows it
        header.append("baseline")
    failed: list[list[str]] = []
    passed: list[list[str]] = []
    for (status, name, metric, observed, bound, _), check in zip(tables.gate_rows(gate), gate.checks, strict=True):
        row = [name, metric, observed, bound]
        if with_baseline:
            row.append(format_value(check.baseline, check.percent) if check.baseline is not None else "")
        (passed if status == "PASS" else failed).append(row)
    return header, failed, passed


def render(report: Report, gate: GateResult | None = None) -> str:
    """The comment's Markdown; it reports the gate, so gate results are required (a UsageError without)."""
    if gate is None:
        raise UsageError(
            "a pull-request comment reports the gate's checks: use `macs-audit gate REPORT --format pr-comment`, "
            "or `report --gate` / `--config`"
        )
    icon = "✅" if gate.passed else "❌"
    basis = "the pessimistic end of the 95% interval where one exists" if gate.use_interval else "point estimates"
    baseline = f"; baseline {esc(gate.baseline)}" if gate.baseline else ""
    lines = [
        MARKER,
        f"### {icon} macs-audit {esc(tables.gate_verdict(gate))}",
        "",
        f"{esc(tables.title(report))}; values compared: {basis}{baseline}.",
        "",
    ]
    header, failed, passed = _check_rows(gate)
    if failed:
        lines += table(header, failed, ALIGN[: len(header)]) + [""]
    if passed:
        word = "check" if len(passed) == 1 else "checks"
        lines += [f"<details><summary>{len(passed)} {word} passed</summary>", ""]
        lines += table(header, passed, ALIGN[: len(header)]) + ["", "</details>", ""]
    version = esc(tables.shown(report.tool.version))
    lines.append(f"<sub>macs-audit {version}; the full report: the run's summary and artifacts.</sub>")
    return "\n".join(lines) + "\n"


def render_comparison(comparison: Comparison) -> str:
    raise UsageError(
        "a pull-request comment reports one report's gate: write it with "
        "`macs-audit gate B.json --baseline A.json --format pr-comment`"
    )
