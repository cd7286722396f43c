"""compare: the deltas of two reports, their direction, and the notes when the reports are not comparable.
(How each format writes a comparison: tests/reports/.)"""

from __future__ import annotations

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.compare import SECTIONS, compare


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
