"""Terminal format: the report's heading, its sections, the gate's table last; a comparison's rows.
(How the tables fit 80 and 120 columns: test_terminal_width.py.)"""

from __future__ import annotations

from report_cases import EVIL, failed_gate, full_report, regressed_comparison

from macs_audit.reports import terminal


def test_terminal_gate_and_full_render():
    report, gate_result = full_report(), failed_gate()
    text = terminal.to_text(terminal.renderable(report, gate_result), width=160)
    assert "gate FAILED: 2 of 4 checks failed" in text
    assert "min_accuracy" in text and "FAIL" in text and "PASS" in text
    assert text.startswith("Calibration audit: ") and "Clean calibration" in text
    assert text.index("Clean calibration") < text.index("Robustness") < text.index("gate FAILED")


def test_terminal_comparison_counts_its_regressions():
    comparison = regressed_comparison()
    text = terminal.to_text(terminal.comparison_table(comparison), width=160)
    assert f"{len(comparison.regressions)} regressions" in text and EVIL in text  # shown as written, not as markup
