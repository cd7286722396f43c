"""The golden report's comparison (tolerances.compare_reports) on hand-made changes of the golden itself: the
discrete events it allows (one sample across a bin edge, one rank swap, a tie between calibrators) and what it
does not (two samples across one edge, a count, a field without a tolerance)."""

import copy
import json

import pytest
from goldens import make_goldens as goldens
from goldens.tolerances import CALIBRATION, FLOATS, compare_reports


@pytest.fixture(scope="module")
def golden():
    return goldens.stable_report(json.loads(goldens.REPORT_GOLDEN.read_text()))


def _move_across_edge(view: dict, b: int, samples: int = 1) -> None:
    """`samples` correct samples at confidence = the edge between bins b and b+1 move from bin b to b+1."""
    rel = view["reliability"]
    edge = rel["edges"][b + 1]
    for _ in range(samples):
        c, a, m = rel["count"][b], rel["accuracy"][b], rel["mean_confidence"][b]
        rel["count"][b] = c - 1
        rel["accuracy"][b] = (a * c - 1) / (c - 1) if c > 1 else None
        rel["mean_confidence"][b] = (m * c - edge) / (c - 1) if c > 1 else None
        c, a, m = rel["count"][b + 1], rel["accuracy"][b + 1] or 0.0, rel["mean_confidence"][b + 1] or 0.0
        rel["count"][b + 1] = c + 1
        rel["accuracy"][b + 1] = (a * c + 1) / (c + 1)
        rel["mean_confidence"][b + 1] = (m * c + edge) / (c + 1)


def _crowded_bin(view: dict, need: int) -> int:
    rel = view["reliability"]
    return next(b for b in range(len(rel["count"]) - 1) if rel["count"][b] > need and rel["accuracy"][b] >= 0.5)


def test_the_golden_matches_itself(golden):
    assert compare_reports(copy.deepcopy(golden), golden) == []


def test_one_sample_across_a_bin_edge_is_allowed_with_its_jump(golden):
    changed = copy.deepcopy(golden)
    view = changed["views"][13]
    _move_across_edge(view, _crowded_bin(view, 3))
    view["metrics"]["ece"] += 0.015  # under the jump one moved sample allows: 2 / n = 0.02
    view["metrics"]["mce"] += 0.1
    assert compare_reports(changed, golden) == []
    view["metrics"]["ece"] += 0.01  # past it
    assert [p.split(":")[0] for p in compare_reports(changed, golden)] == ["/views[13]/metrics/ece"]


def test_two_samples_across_one_edge_fail(golden):
    changed = copy.deepcopy(golden)
    view = changed["views"][13]
    _move_across_edge(view, _crowded_bin(view, 3), samples=2)
    assert any("more than one sample moved" in p for p in compare_reports(changed, golden))


def test_a_swap_in_the_clean_ranking_allows_its_aurc_change(golden):
    changed = copy.deepcopy(golden)
    risk = changed["clean"]["risk_coverage"]["risk"]
    k = next(i + 1 for i in range(20, len(risk)) if 0 < risk[i] < 1)
    risk[k - 1] += 1 / k  # one more error among the k most confident: a right and a wrong sample swapped at rank k
    changed["clean"]["metrics"]["aurc"] += 1 / (100 * k)
    assert compare_reports(changed, golden) == []
    risk[k - 1] += 1 / k
    assert any("more than one error moved" in p for p in compare_reports(changed, golden))


def test_tied_calibrators_may_trade_places(golden):
    # The golden's 20 fit images leave the per-class maps unfitted: give vector scaling temperature's scores, a tie.
    reference = copy.deepcopy(golden)
    methods = {m["method"]: m for m in reference["calibrators"]["methods"]}
    # The golden keeps no map (its T from 20 images scores worse than none); the tie rule is about two maps.
    assert reference["calibrators"]["selected"] == "uncalibrated"
    reference["calibrators"]["selected"] = "temperature"
    methods["vector"]["scores"] = copy.deepcopy(methods["temperature"]["scores"])
    changed = copy.deepcopy(reference)
    changed["calibrators"]["selected"] = "vector"
    assert compare_reports(changed, reference) == []
    changed["calibrators"]["selected"] = "uncalibrated"
    assert compare_reports(changed, reference) == ["/calibrators/selected: 'uncalibrated' against 'temperature'"]


def test_counts_and_unknown_fields_are_exact(golden):
    changed = copy.deepcopy(golden)
    changed["clean"]["metrics"]["n"] = 99
    changed["clean"]["metrics"]["accuracy"] += 0.01
    changed["margin_histogram"]["counts"][0] += 1
    problems = [p.split(":")[0] for p in compare_reports(changed, golden)]
    assert problems == ["/clean/metrics/accuracy", "/clean/metrics/n", "/margin_histogram/counts[0]"]
    added = copy.deepcopy(golden)
    added["robustness"]["new_statistic"] = 0.5
    with_new = copy.deepcopy(added)
    with_new["robustness"]["new_statistic"] = 0.5000001
    assert any("no tolerance is defined" in p for p in compare_reports(with_new, added))


def test_calibration_tolerances_catch_1e_3():
    assert CALIBRATION.abs * 4 <= 1e-3
    assert all(FLOATS[name].abs <= 2.5e-4 and not FLOATS[name].rel for name in ("ece", "adaptive_ece", "smooth_ece"))
