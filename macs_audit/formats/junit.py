"""JUnit XML format: one test case per gate check, so any CI shows failed checks natively.

Structure (the common denominator of Jenkins, GitLab, GitHub test reporters):
<testsuites tests failures errors skipped time>
  <testsuite name tests failures errors skipped time timestamp>
    <properties><property name value/>...</properties>
    <testcase classname name time>[<failure message type>detail</failure>]<system-out>detail</system-out></testcase>
ElementTree does the XML escaping; every attribute and text goes through macs_audit.text's `printable`
first, as XML 1.0 cannot hold control characters (an ESC in a model's name would make the file unparsable).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from macs_audit.errors import UsageError
from macs_audit.formats.tables import comparison_rows, shown
from macs_audit.numbers import format_values
from macs_audit.report import Report
from macs_audit.text import printable

if TYPE_CHECKING:
    from macs_audit.compare import Comparison
    from macs_audit.gating import GateResult


def _document(
    suite_name: str,
    cases: list[tuple[str, str, str | None, str]],
    properties: dict[str, str],
    timestamp: str,
    failure_type: str,
) -> str:
    """cases: (classname, name, failure message or None, text)."""
    failures = sum(1 for _, _, message, _ in cases if message is not None)
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0", "skipped": "0", "time": "0"}
    root = ET.Element("testsuites", {"name": "macs-audit", **counts})
    suite = ET.SubElement(root, "testsuite", {"name": printable(suite_name), **counts})
    if timestamp:  # the JUnit schema's timestamp has no time zone; reports are written in UTC
        suite.set("timestamp", printable(timestamp[:19]))
    props = ET.SubElement(suite, "properties")
    for name, value in properties.items():
        ET.SubElement(props, "property", {"name": printable(name), "value": printable(value)})
    for classname, name, message, text in cases:
        case = ET.SubElement(
            suite, "testcase", {"classname": printable(classname), "name": printable(name), "time": "0"}
        )
        if message is not None:
            failure = ET.SubElement(case, "failure", {"message": printable(message), "type": failure_type})
            failure.text = printable(text)
        ET.SubElement(case, "system-out").text = printable(text)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=False).join(
        ['<?xml version="1.0" encoding="UTF-8"?>\n', "\n"]
    )


def _properties(report: Report) -> dict[str, str]:
    return {
        "model": shown(report.model.path),
        "sha256": shown(report.model.sha256, "-"),
        "data": shown(report.data.source),
        "n": shown(report.data.n),
        "report_created": report.created or "-",
        "macs_audit_version": shown(report.tool.version),
    }


def render(report: Report, gate: GateResult | None = None) -> str:
    """One test case per gate check: without gate results there is nothing to list."""
    if gate is None:
        raise UsageError(
            "JUnit output lists gate checks: use `macs-audit gate REPORT --format junit`, "
            "or `report --gate` / `--config`"
        )
    cases = []
    for check in gate.checks:
        observed, bound = format_values((check.observed, check.threshold), check.percent)
        text = f"{check.metric}: {observed} (must be {check.op} {bound}); {check.detail}"
        message = None if check.passed else f"{check.metric} {observed} is not {check.op} {bound}"
        section = check.name.split(".")[0] if "." in check.name else "absolute"
        cases.append((f"macs-audit.gate.{section}", check.name, message, text))
    properties = {
        **_properties(report),
        "use_interval": str(gate.use_interval).lower(),
        "config": gate.config or "-",
        "baseline": gate.baseline or "-",
    }
    return _document("macs-audit gate", cases, properties, report.created or "", "threshold")


def render_comparison(comparison: Comparison) -> str:
    """One test case per compared value; a regression (a metric the gate failed: Comparison.regressions) is a
    failure, a row worse beyond the noise alone passes with `worse` in its text, as the headline counts them."""
    cases = []
    for row, (section, label, va, vb, delta, status) in zip(comparison.rows, comparison_rows(comparison), strict=True):
        text = f"{label}: {va} -> {vb} ({delta}, {status})"
        failed = f"{label} regressed: {va} -> {vb} ({delta}); the gate failed {row.gate_failed}"
        cases.append((f"macs-audit.compare.{section}", row.key, failed if row.gate_failed else None, text))
    properties = {
        "a": shown(comparison.a.model.path),
        "b": shown(comparison.b.model.path),
        "a_name": comparison.a_name,
        "b_name": comparison.b_name,
        "headline": comparison.headline,
    }
    return _document("macs-audit compare", cases, properties, comparison.b.created or "", "regression")
