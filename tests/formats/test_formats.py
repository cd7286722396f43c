"""The format registry (macs_audit.formats: FORMATS, format_module, render, render_comparison)."""

from __future__ import annotations

import pytest
from fixtures.synthetic_report import synthetic_report
from report_cases import failed_gate, full_report

from macs_audit import formats
from macs_audit.compare import compare
from macs_audit.errors import UsageError
from macs_audit.formats import terminal


def test_every_format_renders_a_report_and_a_comparison_as_text():
    report, gate_result = full_report(), failed_gate()
    comparison = compare(report, synthetic_report(accuracy=0.9, corruptions=["fog"]))
    for name in formats.FORMATS:
        module = formats.format_module(name)
        text = formats.render(name, report, gate_result)
        assert isinstance(text, str) and text == module.render(report, gate_result)
        if name in ("model-card", "pr-comment"):  # a card describes one model; a comment, one gate
            with pytest.raises(UsageError, match="one model|one report's gate"):
                formats.render_comparison(name, comparison)
            continue
        assert isinstance(formats.render_comparison(name, comparison), str)
    assert formats.render("terminal", report) == terminal.to_text(terminal.renderable(report), width=terminal.WIDTH)


def test_unknown_format_and_junit_without_a_gate_are_usage_errors():
    report = full_report()
    with pytest.raises(UsageError, match="unknown format 'pdf'"):
        formats.format_module("pdf")
    with pytest.raises(UsageError, match="JUnit output lists gate checks"):
        formats.render("junit", report)
