"""JUnit XML format: one test case per gate check (or compared value), well-formed whatever the report holds."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from report_cases import EVIL, evil_report, failed_gate, full_report, regressed_comparison

from macs_audit.formats import junit
from macs_audit.gating import parse_config, run_gate


def test_junit_has_the_standard_structure_and_failure_counts():
    report, gate_result = full_report(), failed_gate()
    root = ET.fromstring(junit.render(report, gate_result).encode("utf-8"))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    for element in (root, suite):
        assert element.get("tests") == "4" and element.get("failures") == "2"
        assert element.get("errors") == "0" and element.get("skipped") == "0"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["min_accuracy", "max_ece", "max_nll", "min_robust_accuracy"]
    assert all(c.get("classname") and c.get("time") == "0" for c in cases)
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["min_accuracy", "max_ece"]
    failure = cases[0].find("failure")
    assert failure.get("type") == "threshold" and "92.00% is not >= 95.00%" in failure.get("message")
    assert {p.get("name") for p in suite.find("properties")} >= {"model", "sha256", "use_interval"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", suite.get("timestamp"))


def test_junit_all_passing_and_escaping():
    hostile = evil_report()
    result = run_gate(hostile, parse_config({"max_ece": 0.5}, f"cfg {EVIL}"))
    text = junit.render(hostile, result)
    root = ET.fromstring(text.encode("utf-8"))  # still well-formed
    assert root.get("failures") == "0" and root.find("testsuite/testcase/failure") is None
    assert "<script>" not in text


def test_junit_comparison_without_a_gate_fails_nothing_and_says_worse():
    """A regression is a check the gate failed (tests/test_compare_headline.py: a failure each); without a gate
    the worse rows pass, with `worse` in their text."""
    comparison = regressed_comparison()
    root = ET.fromstring(junit.render_comparison(comparison).encode("utf-8"))
    assert root.get("failures") == "0" and comparison.worse
    outputs = [e.text for e in root.iter("system-out")]
    assert sum(", worse)" in (text or "") for text in outputs) == len(comparison.worse)
    assert root.get("tests") == str(len(comparison.rows))
