"""compare: the deltas of two reports, their direction, and the notes when the reports are not comparable.
(How each format writes a comparison: tests/formats/.)"""

from __future__ import annotations

import pytest
from fixtures.synthetic_report import synthetic_report

from macs_audit.compare import PAIRED, SECTIONS, TARGET, UNPAIRED, compare


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
    assert rows["ece"] in comparison.worse and rows["accuracy"] not in comparison.worse
    sections = [r.section for r in comparison.rows]
    assert sections == sorted(sections, key=SECTIONS.index)


def test_compare_notes_incomparable_reports():
    a, b = synthetic_report(), synthetic_report(n=5000)
    b.conventions.ece_bins = 10
    notes = compare(a, b).notes
    assert any("data n" in n for n in notes) and any("ece_bins" in n for n in notes)
    assert compare(a, a).notes == [] and compare(a, a).worse == []


def test_a_change_within_the_noise_is_the_same():
    """Accuracy 92.00% [91.50%, 92.50%] against 92.30%: the combined interval of the difference holds zero."""
    a, b = synthetic_report(accuracy=0.92), synthetic_report(accuracy=0.923)
    rows = {r.key: r for r in compare(a, b).rows}
    accuracy = rows["accuracy"]
    assert accuracy.delta == pytest.approx(0.003) and accuracy.status == "same"
    assert accuracy.basis == UNPAIRED and accuracy.interval[0] < 0 < accuracy.interval[1]
    assert accuracy.interval == pytest.approx([0.003 - 0.005 * 2**0.5, 0.003 + 0.005 * 2**0.5])
    assert accuracy not in compare(a, b).worse


def test_a_value_without_an_interval_is_the_same_when_it_barely_moves():
    a, b = synthetic_report(), synthetic_report()
    b.temperature_scaling.scaled["nll"] = a.temperature_scaling.scaled["nll"] + 1e-6  # 0.3800 -> 0.3800
    b.robustness.robustness_ratio = a.robustness.robustness_ratio * (1 - 1e-6)
    rows = {r.key: r for r in compare(a, b).rows}
    assert rows["scaled_nll"].status == "same" and rows["scaled_nll"].interval is None
    assert rows["robustness_ratio"].status == "same"
    b.robustness.robustness_ratio = a.robustness.robustness_ratio * 0.5
    assert {r.key: r for r in compare(a, b).rows}["robustness_ratio"].status == "worse"


def test_conformal_coverage_is_judged_against_its_target():
    a, b = synthetic_report(), synthetic_report()
    a.conformal.methods["lac"]["coverage"], b.conformal.methods["lac"]["coverage"] = 0.9034, 0.9004
    a.conformal.n_eval = b.conformal.n_eval = 8000
    rows = {r.key: r for r in compare(a, b).rows}
    coverage = rows["conformal_coverage"]
    assert coverage.status == "same" and coverage.basis == TARGET and coverage.target == pytest.approx(0.9)
    b.conformal.methods["lac"]["coverage"] = 0.88  # short of 90% beyond the noise of 8000 images
    assert {r.key: r for r in compare(a, b).rows}["conformal_coverage"].status == "worse"
    assert {r.key: r for r in compare(b, a).rows}["conformal_coverage"].status == "better"
    assert compare(a, b).to_dict()["rows"][0]["basis"] == UNPAIRED  # the JSON says how each row was judged


def test_a_paired_interval_decides_where_the_caller_has_one():
    a, b = synthetic_report(accuracy=0.92), synthetic_report(accuracy=0.923)
    rows = {r.key: r for r in compare(a, b, paired={"accuracy": [0.001, 0.005]}).rows}
    assert rows["accuracy"].status == "better" and rows["accuracy"].basis == PAIRED


def test_the_headline_counts_only_changes_beyond_the_noise():
    a = synthetic_report(accuracy=0.92, ece=0.03)
    b = synthetic_report(accuracy=0.921, ece=0.0305)  # within every interval
    assert compare(a, b).worse == []
    worse = synthetic_report(accuracy=0.85, ece=0.09)
    keys = {r.key for r in compare(a, worse).worse}
    assert {"accuracy", "ece", "nll"} <= keys
