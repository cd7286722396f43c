"""Markdown format: the verdict first, the gate's checks, the sections present, every report string escaped."""

from __future__ import annotations

import re

from report_cases import bare_report, evil_report, failed_gate, full_report, regressed_comparison

from macs_audit.formats import markdown


def test_markdown_leads_with_the_verdict_and_lists_every_check():
    report, gate_result = full_report(), failed_gate()
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


def test_markdown_skips_absent_sections():
    bare = bare_report()
    text = markdown.render(bare)
    assert "### Clean calibration" in text
    for heading in ("### Temperature", "### Robustness", "### Corruptions"):
        assert heading not in text


def test_markdown_escapes_report_strings():
    hostile = evil_report()
    text = markdown.render(hostile)
    assert "<script>" not in text and "<b>" not in text
    assert "&lt;script&gt;" in text and "\\|x.onnx" in text
    # Every table row keeps its column count despite the `|` in the model path.
    for block in re.findall(r"((?:^\|.*\|$\n?)+)", text, flags=re.M):
        rows = block.strip().splitlines()
        widths = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
        assert len(widths) == 1, rows


def test_markdown_comparison_marks_each_worse_row():
    comparison = regressed_comparison()
    n = len(comparison.worse)
    text = markdown.render_comparison(comparison)
    assert f"{n} metrics worse beyond the noise (no gate ran)" in text.splitlines()[0]
    assert text.count("🔴") == n and "<script>" not in text


def test_the_audit_opens_with_its_summary_and_without_a_gate_its_own_verdict():
    import copy

    from report_cases import full_report

    report = copy.deepcopy(full_report())
    report.clean.metrics["ece"] = 0.0412
    text = markdown.render(report)
    head = text[: text.index("### ")]
    assert "**audit: " in head and "- ECE (15 bins): **4.12% " in head
    assert "- fix: temperature scaling (T = 1.600) lowers ECE from 3.00% to 1.00% on 8,000 held-out images: " in head
    assert "`macs-audit calibrate synthetic.onnx --data HELD_OUT.npz --out calibrated`" in head
    report.model.path = "a`b.onnx"  # a backtick cannot end the code span early
    (line,) = [line for line in markdown.render(report).splitlines() if "macs-audit calibrate" in line]
    assert line.count("`") == 2 and line.endswith("--out calibrated`")
