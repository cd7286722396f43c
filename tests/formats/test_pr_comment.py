"""The pull-request comment: its marker first, the verdict, the failed checks before the passing ones with their
values (the baseline's where one was compared), every report string escaped, and nothing without a gate."""

from __future__ import annotations

import re

import pytest
from fixtures.synthetic_report import synthetic_report
from report_cases import EVIL, evil_report, failed_gate, full_report

from macs_audit import formats
from macs_audit.errors import UsageError
from macs_audit.formats import pr_comment
from macs_audit.gating import parse_config, run_gate


def rows(text: str) -> list[list[str]]:
    """The cells of every table row but the headers and rules."""
    lines = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| check ")]
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]


def test_the_marker_then_the_verdict_then_the_failed_checks_before_the_passing_ones():
    text = pr_comment.render(full_report(), failed_gate())
    lines = text.splitlines()
    assert lines[0] == pr_comment.MARKER == "<!-- macs-audit-pr-comment -->"
    assert lines[1].startswith("### ❌ macs-audit gate FAILED: 2 of 4 checks failed (min\\_accuracy, max\\_ece)")
    checks = [row[0] for row in rows(text)]
    assert checks == ["min\\_accuracy", "max\\_ece", "max\\_nll", "min\\_robust\\_accuracy"]
    failed_end, folded = text.index("max\\_ece |"), text.index("<details><summary>2 checks passed</summary>")
    assert failed_end < folded < text.index("max\\_nll |")
    # The values that decided: observed and threshold as the gate compared them (synthetic: accuracy 92%, ECE 3%).
    assert rows(text)[0][2:] == ["92.00%", "&gt;= 95.00%"] and rows(text)[1][2:] == ["3.00%", "&lt;= 2.00%"]
    assert "baseline" not in text.split("<details>")[0].split("\n| check")[1].splitlines()[0]  # no baseline column


def test_a_passing_gate_folds_every_check_and_the_baseline_values_are_shown():
    base = synthetic_report(accuracy=0.93, ece=0.025, corruptions=[])
    cfg = parse_config({"max_ece": 0.05, "baseline": {"max_accuracy_drop": 0.02, "max_ece_increase": 0.01}}, "cfg")
    result = run_gate(full_report(), cfg, base, baseline_name="base.json")
    text = pr_comment.render(full_report(), result)
    assert text.splitlines()[1] == "### ✅ macs-audit gate passed: 3 of 3 checks"
    assert "<details><summary>3 checks passed</summary>" in text and "baseline base.json" in text
    by_check = {row[0]: row for row in rows(text)}
    assert by_check["max\\_ece"][4] == ""  # an absolute check: no baseline value
    assert by_check["baseline.max\\_accuracy\\_drop"][2:] == ["92.00%", "&gt;= 91.00%", "93.00%"]
    assert by_check["baseline.max\\_ece\\_increase"][4] == "2.50%"


def test_report_and_config_strings_are_escaped():
    hostile = evil_report()
    cfg = parse_config({"max_ece": 0.001, "baseline": {"max_ece_increase": 0.0}}, f"cfg {EVIL}")
    result = run_gate(hostile, cfg, hostile, baseline_name=EVIL)
    text = pr_comment.render(hostile, result)
    assert "<script>" not in text and "<b>" not in text and "&lt;script&gt;" in text
    assert text.count("<!--") == 1  # the marker alone: nothing from the report can open a comment
    for row in rows(text):  # the `|` of the model path does not add a column
        assert len(row) == 5


def test_without_gate_results_it_is_a_usage_error_and_it_has_no_comparison():
    with pytest.raises(UsageError, match="pull-request comment reports the gate's checks"):
        formats.render("pr-comment", full_report())
    assert "pr-comment" in formats.GATE_FORMATS
    with pytest.raises(UsageError, match="--format pr-comment"):
        pr_comment.render_comparison(None)  # type: ignore[arg-type]
