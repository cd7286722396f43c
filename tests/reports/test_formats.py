"""Output formats: JSON, Markdown, JUnit XML, HTML (with plots), terminal tables, and compare."""

from __future__ import annotations

import base64
import json
import re
import xml.etree.ElementTree as ET

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit import reports
from macs_audit.compare import SECTIONS, compare
from macs_audit.errors import UsageError
from macs_audit.gate import parse_config, run_gate
from macs_audit.report import SCHEMA_VERSION, Report
from macs_audit.reports import html, json_report, junit, markdown, plots, terminal

EVIL = '<script>alert("x")</script>'
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report():
    return synthetic_report(corruptions=["gaussian_noise", "fog", "contrast", "saturate"])


@pytest.fixture(scope="module")
def gate_result(report):
    # 2 of 4 checks fail: accuracy 92% < 95%, ECE 3% > 2%.
    cfg = parse_config({"min_accuracy": 0.95, "max_ece": 0.02, "max_nll": 1.0, "min_robust_accuracy": 0.5}, "test")
    return run_gate(report, cfg)


@pytest.fixture(scope="module")
def bare():
    """Only the clean section: no temperature scaling, margins, robustness or corruptions."""
    r = synthetic_report(robustness=False, corruptions=[])
    r.views, r.temperature_scaling, r.margin_histogram = [], None, None
    return r


def evil_report():
    r = synthetic_report(
        corruptions=["fog"], class_names=[EVIL, "a|b", *"cdefghij"[:8]], model_path=f"models/{EVIL}|x.onnx"
    )
    r.data.source = "src & <b>bold</b>"
    return r


# ---------------------------------------------------------------------------------- JSON


def test_json_round_trips_and_carries_the_gate(report, gate_result):
    text = json_report.render(report, gate_result)
    data = json.loads(text)
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["gate"]["passed"] is False and data["gate"]["n_failed"] == 2
    back = Report.from_json(text)  # the extra "gate" key does not stop the report being read back
    assert back.to_dict() == report.to_dict()
    assert "gate" not in json.loads(json_report.render(report))


# ---------------------------------------------------------------------------------- Markdown


def test_markdown_leads_with_the_verdict_and_lists_every_check(report, gate_result):
    text = markdown.render(report, gate_result)
    assert text.startswith("## ❌ macs-audit gate FAILED: 2 of 4 checks failed")
    assert text.count("| ❌ |") == 2 and text.count("| ✅ |") == 2
    for heading in (
        "### Gate",
        "### Clean calibration",
        "### Temperature scaling",
        "### Robustness",
        "### Corruptions (accuracy by severity)",
        "<details><summary>Conventions",
    ):
        assert heading in text
    assert "### Gate" not in markdown.render(report)


def test_markdown_skips_absent_sections(bare):
    text = markdown.render(bare)
    assert "### Clean calibration" in text
    for heading in ("### Temperature", "### Robustness", "### Corruptions"):
        assert heading not in text


def test_markdown_escapes_report_strings():
    text = markdown.render(evil_report())
    assert "<script>" not in text and "<b>" not in text
    assert "&lt;script&gt;" in text and "\\|x.onnx" in text
    # Every table row keeps its column count despite the `|` in the model path.
    for block in re.findall(r"((?:^\|.*\|$\n?)+)", text, flags=re.M):
        rows = block.strip().splitlines()
        widths = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
        assert len(widths) == 1, rows


# ---------------------------------------------------------------------------------- JUnit


def test_junit_has_the_standard_structure_and_failure_counts(report, gate_result):
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
    r = evil_report()
    result = run_gate(r, parse_config({"max_ece": 0.5}, f"cfg {EVIL}"))
    text = junit.render(r, result)
    root = ET.fromstring(text.encode("utf-8"))  # still well-formed
    assert root.get("failures") == "0" and root.find("testsuite/testcase/failure") is None
    assert "<script>" not in text


# ---------------------------------------------------------------------------------- HTML and plots


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_html_is_self_contained_with_embedded_images(report, gate_result):
    page = html.render(report, gate_result)
    images = _images(page)
    # reliability + confidence histogram (clean, and the robust view), margin histogram, corruption heat map
    assert len(images) == 4
    assert all(img.startswith(PNG_SIGNATURE) and len(img) > 5000 for img in images)
    assert not re.search(r"(src|href)=\"(?!data:)", page)  # no external resources of any kind
    assert "http://" not in page and "https://" not in page and "<script" not in page
    assert "Content-Security-Policy" in page
    assert "gate FAILED: 2 of 4 checks failed" in page and page.count('<tr class="failed">') == 2
    for section in (
        'id="gate"',
        'id="clean"',
        'id="temperature"',
        'id="margins"',
        'id="robustness"',
        'id="corruptions"',
        'id="conventions"',
    ):
        assert section in page


def test_html_escapes_every_report_string():
    page = html.render(evil_report())
    assert "<script" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page  # the class name, shown as text
    assert "src &amp; &lt;b&gt;bold&lt;/b&gt;" in page


def test_html_of_a_bare_report_skips_absent_sections(bare):
    page = html.render(bare)
    assert len(_images(page)) == 1  # the reliability diagram only
    assert 'id="corruptions"' not in page and 'id="robustness"' not in page and 'id="gate"' not in page


def test_plots_return_png_or_none(report, bare):
    assert plots.reliability(report.clean).startswith(PNG_SIGNATURE)
    assert plots.margin_histogram(bare) is None and plots.corruption_heatmap(bare) is None
    bare_view = synthetic_report().clean
    bare_view.reliability = None
    assert plots.reliability(bare_view) is None


# ---------------------------------------------------------------------------------- terminal


def test_terminal_gate_and_full_render(report, gate_result):
    text = terminal.to_text(terminal.renderable(report, gate_result), width=160)
    assert "gate FAILED: 2 of 4 checks failed" in text
    assert "min_accuracy" in text and "FAIL" in text and "PASS" in text
    assert "Calibration audit" in text


# ---------------------------------------------------------------------------------- compare


def test_compare_deltas_and_regressions():
    a = synthetic_report(accuracy=0.92, ece=0.03, corruptions=["fog"])
    b = synthetic_report(accuracy=0.93, ece=0.05, corruptions=["fog", "snow"])
    comparison = compare(a, b, "main.json", "pr.json")
    rows = {r.key: r for r in comparison.rows}
    assert rows["accuracy"].delta == pytest.approx(0.01) and rows["accuracy"].status == "better"
    assert rows["ece"].delta == pytest.approx(0.02) and rows["ece"].status == "worse"
    assert rows["ece"].relative == pytest.approx(2 / 3)
    assert rows["mean_confidence"].status == "changed"  # no better direction
    assert rows["snow.accuracy"].status == "missing" and rows["snow.accuracy"].a is None
    assert rows["temperature"].status == "same"
    assert rows["ece"] in comparison.regressions and rows["accuracy"] not in comparison.regressions
    sections = [r.section for r in comparison.rows]
    assert sections == sorted(sections, key=SECTIONS.index)


def test_compare_notes_incomparable_reports():
    a, b = synthetic_report(), synthetic_report(n=5000)
    b.conventions.ece_bins = 10
    notes = compare(a, b).notes
    assert any("data n" in n for n in notes) and any("ece_bins" in n for n in notes)
    assert compare(a, a).notes == [] and compare(a, a).regressions == []


def test_compare_renders_in_every_format():
    a = synthetic_report(corruptions=["fog"])
    b = synthetic_report(accuracy=0.9, ece=0.05, corruptions=["fog"], class_names=[EVIL] * 10)
    b.model.path = EVIL
    comparison = compare(a, b, "a.json", EVIL)
    n = len(comparison.regressions)
    assert n > 0
    data = json.loads(json_report.render_comparison(comparison))
    assert data["kind"] == "comparison" and data["n_regressions"] == n and len(data["rows"]) == len(comparison.rows)
    md = markdown.render_comparison(comparison)
    assert f"{n} regressions" in md and md.count("🔴") == n and "<script>" not in md
    root = ET.fromstring(junit.render_comparison(comparison).encode("utf-8"))
    assert root.get("failures") == str(n) and root.get("tests") == str(len(comparison.rows))
    page = html.render_comparison(comparison)
    assert "<script" not in page and page.count('<tr class="worse">') == n and len(_images(page)) == 1
    text = terminal.to_text(terminal.comparison_table(comparison), width=160)
    assert f"{n} regressions" in text


# ---------------------------------------------------------------------------------- the format registry


def test_every_format_renders_a_report_and_a_comparison_as_text(report, gate_result):
    comparison = compare(report, synthetic_report(accuracy=0.9, corruptions=["fog"]))
    for name in reports.FORMATS:
        module = reports.format_module(name)
        text = reports.render(name, report, gate_result)
        assert isinstance(text, str) and text == module.render(report, gate_result)
        assert isinstance(reports.render_comparison(name, comparison), str)
    assert reports.render("terminal", report) == terminal.to_text(terminal.renderable(report), width=terminal.WIDTH)


def test_unknown_format_and_junit_without_a_gate_are_usage_errors(report):
    with pytest.raises(UsageError, match="unknown format 'pdf'"):
        reports.format_module("pdf")
    with pytest.raises(UsageError, match="JUnit output lists gate checks"):
        reports.render("junit", report)
