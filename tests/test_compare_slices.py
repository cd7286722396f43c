"""compare's slices (compare.py, SliceMatch): two reports' slices matched by (column, value), each matched slice's
accuracy and ECE in both with the change judged by the slices' own intervals (binomial on the slices' images without
them), the slices of one report only listed, never dropped, and the two multicalibration errors."""

from __future__ import annotations

import copy
import json
import math
import xml.etree.ElementTree as ET

import pytest
from fixtures.synthetic_report import synthetic_report, synthetic_slices
from scipy import stats

from macs_audit.compare import BINOMIAL, UNPAIRED, compare
from macs_audit.formats import html, json_report, junit, markdown, terminal
from macs_audit.gating.checks import run_gate
from macs_audit.gating.config import parse_config

DARK, NORMAL = ("lighting", "dark"), ("lighting", "normal")


@pytest.fixture(scope="module")
def section():
    return synthetic_slices()


def pair(section):
    """A and B with the same slices but that B has no `camera = B` and a `camera = D` A lacks, and B's dark slice
    is 20 points more accurate, its interval as wide."""
    a, b = synthetic_report(), synthetic_report()
    a.slices, b.slices = copy.deepcopy(section), copy.deepcopy(section)
    b.slices.slices = [s for s in b.slices.slices if (s.column, s.value) != ("camera", "B")]
    extra = copy.deepcopy(next(s for s in b.slices.slices if (s.column, s.value) == ("camera", "C")))
    extra.value, extra.n = "D\x1b[2J", 150
    b.slices.slices.append(extra)
    dark = next(s for s in b.slices.slices if (s.column, s.value) == DARK)
    dark.metrics["accuracy"] += 0.2
    dark.intervals["accuracy"] = [v + 0.2 for v in dark.intervals["accuracy"]]
    b.slices.multicalibration = dict(b.slices.multicalibration, error=0.02, column="lighting", value="normal")
    return a, b


def rows_of(comparison):
    return {r.key: r for r in comparison.rows if r.section == "slices"}


def test_matched_slices_show_both_values_and_the_change(section):
    a, b = pair(section)
    rows = rows_of(compare(a, b))
    dark_a = next(s for s in a.slices.slices if (s.column, s.value) == DARK)
    accuracy = rows["lighting = dark.accuracy"]
    assert accuracy.a == dark_a.metrics["accuracy"] and accuracy.delta == pytest.approx(0.2)
    assert accuracy.status == "better" and accuracy.basis == UNPAIRED
    assert accuracy.label == "lighting = dark accuracy"
    ece = rows["lighting = dark.ece"]
    assert ece.a == ece.b == dark_a.metrics["ece"] and ece.status == "same"
    assert rows["lighting = normal.accuracy"].status == "same"
    multicalibration = rows["multicalibration_error"]
    assert multicalibration.a == a.slices.multicalibration["error"] and multicalibration.b == 0.02
    assert multicalibration.higher_is_better is False and multicalibration.percent


def test_slices_of_one_report_are_listed_never_dropped(section):
    a, b = pair(section)
    comparison = compare(a, b)
    rows = rows_of(comparison)
    only_a, only_b = rows["camera = B.accuracy"], rows["camera = D\\x1b[2J.accuracy"]
    assert only_a.b is None and only_a.a is not None and only_a.status == "missing"
    assert only_b.a is None and only_b.b is not None and only_b.status == "missing"
    names = {(s.column, s.value) for s in a.slices.slices} | {(s.column, s.value) for s in b.slices.slices}
    assert len(rows) == 2 * len(names) + 1  # accuracy and ECE of every slice of either, and multicalibration
    (note,) = [n for n in comparison.notes if n.startswith("slices matched by (column, value)")]
    assert f"{len(names) - 2} in both" in note
    assert "only in A: camera = B (n=1139)" in note and "only in B: camera = D\\x1b[2J (n=150)" in note
    matched = comparison.to_dict()["slices"]
    assert matched["matched_by"] == "(column, value)" and len(matched["both"]) == len(names) - 2
    assert matched["only_a"] == [{"column": "camera", "value": "B", "n": 1139}]
    assert matched["only_b"] == [{"column": "camera", "value": "D\x1b[2J", "n": 150}]


def test_without_intervals_a_slice_is_judged_binomially_on_its_own_images(section):
    a, b = pair(section)
    for report in (a, b):
        next(s for s in report.slices.slices if (s.column, s.value) == DARK).intervals = {}
    row = rows_of(compare(a, b))["lighting = dark.accuracy"]
    pa, pb = row.a, row.b
    half = stats.norm.ppf(0.975) * math.sqrt(pa * (1 - pa) / 399 + pb * (1 - pb) / 399)  # 399: the slice's images
    assert row.basis == BINOMIAL and row.interval == pytest.approx([pb - pa - half, pb - pa + half])


def test_one_report_with_slices_and_one_without(section):
    a, b = pair(section)
    b.slices = None
    comparison = compare(a, b)
    rows = rows_of(comparison)
    assert rows and all(r.status == "missing" and r.b is None for r in rows.values())
    assert "only A has a slices section: its slices are shown, the other side missing" in comparison.notes
    assert comparison.to_dict()["slices"]["min_size"] == {"a": 100, "b": None}


def test_reports_without_slices_compare_as_before():
    comparison = compare(synthetic_report(), synthetic_report())
    assert not rows_of(comparison) and comparison.notes == [] and comparison.to_dict()["slices"] is None


def test_a_failed_multicalibration_check_marks_its_row_and_a_slice_check_adds_a_gate_row(section):
    a, b = pair(section)
    b.slices.multicalibration["error"] = 0.2
    config = parse_config({"slices": {"max_multicalibration_error": 0.1, "min_slice_accuracy": 0.6}})
    comparison = compare(a, b, gate=run_gate(b, config))
    assert rows_of(comparison)["multicalibration_error"].gate_failed == "slices.max_multicalibration_error"
    (gate_row,) = [r for r in comparison.rows if r.section == "gate"]
    assert gate_row.key == "slices.min_slice_accuracy" and gate_row.status == "worse"
    assert comparison.n_regressions == 2


def test_every_format_shows_the_slices_escaped(section):
    a, b = pair(section)
    comparison = compare(a, b, "a.json", "b.json")
    text = terminal.to_text(terminal.comparison_table(comparison), width=250)
    assert "lighting = dark accuracy" in text and "camera = D\\x1b[2J" in text and "\x1b[2J" not in text
    md = markdown.render_comparison(comparison)
    assert "lighting = dark accuracy" in md and "only in B: camera = D" in md and "\x1b" not in md
    assert "lighting = dark accuracy" in html.render_comparison(comparison)
    data = json.loads(json_report.render_comparison(comparison))
    assert any(r["key"] == "multicalibration_error" for r in data["rows"]) and data["slices"]["only_a"]
    cases = ET.fromstring(junit.render_comparison(comparison)).iter("testcase")
    assert "lighting = dark.accuracy" in {case.get("name") for case in cases}
