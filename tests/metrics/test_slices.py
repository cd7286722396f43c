"""metrics/slices.py: the slices of a column, each slice's statistics and gaps against references (scipy's tests,
Newcombe's published example, a direct loop for the multicalibration error), and the corrections."""

from __future__ import annotations

import numpy as np
import pytest

from macs_audit.errors import UsageError
from macs_audit.metrics import slices
from macs_audit.metrics.accumulators import calibration_metrics

stats = pytest.importorskip("scipy.stats")


def _scores(n: int, seed: int = 0, accuracy_drop: np.ndarray | None = None) -> slices.Scores:
    """Calibrated made-up scores (correct with probability = confidence), less accurate where `accuracy_drop`."""
    rng = np.random.default_rng(seed)
    confidence = rng.uniform(0.3, 1, n)
    correct = rng.uniform(size=n) < confidence
    if accuracy_drop is not None:
        correct[accuracy_drop] = rng.uniform(size=int(accuracy_drop.sum())) < 0.3
    nll = -np.log(np.where(correct, confidence, (1 - confidence) / 9))
    return slices.Scores(confidence, correct, nll)


def test_numeric_columns_cut_at_quantiles_and_text_columns_by_value():
    values = np.array([0.1, 0.2, 0.3, 0.4, np.nan, 0.5, 0.6, 0.7, 0.8, 0.9])
    text = np.array(["b", "a", None, "b", "a", "a", None, "b", "c", "a"], dtype=object)
    cut = slices.define_slices({"x": values, "site": text}, bins=3)
    numeric = [s for s in cut if s.column == "x"]
    assert [len(s.members) for s in numeric] == [3, 3, 3]  # the NaN in none
    assert numeric[-1].value.endswith("]") and numeric[0].value.endswith(")")
    assert 4 not in np.concatenate([s.members for s in numeric])
    by_value = {s.value: s.members.tolist() for s in cut if s.column == "site"}
    assert by_value == {"a": [1, 4, 5, 9], "b": [0, 3, 7], "c": [8]}


def test_repeated_quantile_edges_give_fewer_bins_and_few_values_slice_by_value():
    values = np.array([0.0] * 14 + [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    cut = slices.define_slices({"x": values}, bins=5)
    assert sum(len(s.members) for s in cut) == 20
    assert [(s.value, len(s.members)) for s in cut] == [("[0, 2.2)", 16), ("[2.2, 6]", 4)]
    codes = slices.define_slices({"camera": np.array([1.0, 2.0, 3.0, 2.0, 1.0, np.nan])}, bins=5)
    assert [(s.value, s.members.tolist()) for s in codes] == [("1", [0, 4]), ("2", [1, 3]), ("3", [2])]


def test_accuracy_gap_matches_newcombes_example_and_the_chi_square_test():
    # Newcombe (1998), Statistics in Medicine 17: 873-890, the example 56/70 against 48/80: method 10 (hybrid
    # score) gives 0.0524 to 0.3339.
    gap = slices.accuracy_gap(56, 70, 48, 80)
    assert gap["gap"] == pytest.approx(0.2)
    assert gap["interval"] == pytest.approx([0.0524, 0.3339], abs=1e-4)
    # The pooled two-proportion z-test is the chi-square test of the 2x2 table without continuity correction.
    table = [[56, 14], [48, 32]]
    assert gap["p_value"] == pytest.approx(stats.chi2_contingency(table, correction=False)[1], rel=1e-9)


def test_overconfidence_gap_is_welchs_statistic():
    rng = np.random.default_rng(3)
    inside, outside = rng.normal(0.03, 0.3, 400), rng.normal(0.0, 0.2, 3000)
    gap = slices.mean_gap(inside, float(outside.sum()), float((outside**2).sum()), len(outside))
    welch = stats.ttest_ind(inside, outside, equal_var=False)
    se = (gap["interval"][1] - gap["interval"][0]) / (2 * slices.Z95)
    assert gap["gap"] / se == pytest.approx(welch.statistic, rel=1e-9)
    assert gap["p_value"] == pytest.approx(2 * stats.norm.sf(abs(welch.statistic)), rel=1e-9)  # its normal p
    assert gap["p_value"] == pytest.approx(welch.pvalue, rel=0.05)  # and Welch's t's, at ~450 degrees of freedom


def test_holm_by_hand_and_bh_against_scipy():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    assert slices.adjust(p, "holm") == pytest.approx([0.03, 0.06, 0.06, 0.02])
    many = np.random.default_rng(0).uniform(size=50) ** 3
    assert slices.adjust(many, "bh") == pytest.approx(stats.false_discovery_control(many), rel=1e-12)
    assert slices.adjust(np.array([]), "holm").size == 0
    with pytest.raises(UsageError):
        slices.adjust(p, "bonferroni")


def test_slice_metrics_are_the_views_metrics_of_its_images():
    scores = _scores(3000, seed=1)
    site = np.array(["a", "b", "c"], dtype=object)[np.arange(3000) % 3]
    result = slices.analyse_slices(scores, slices.define_slices({"site": site}, 5), resamples=200)
    record = next(r for r in result["scored"] if r["value"] == "b")
    members = np.arange(3000)[1::3]
    # The same ECE as an accumulator's of the slice's images, from logits whose softmax gives those confidences.
    p = scores.confidence[members]
    labels = np.where(scores.correct[members], 0, 1)
    probabilities = np.repeat(((1 - p) / 9)[:, None], 10, axis=1)
    probabilities[:, 0] = p
    logits = np.log(probabilities)
    expected = calibration_metrics(logits, labels, 10)
    assert record["metrics"]["ece"] == pytest.approx(expected["ece"], abs=1e-12)
    assert record["metrics"]["accuracy"] == pytest.approx(scores.correct[members].mean())
    for name, (low, high) in record["intervals"].items():
        assert low <= record["metrics"][name] + 1e-12 and record["metrics"][name] <= high + 1e-12, name
    # The accuracy interval about as wide as Wilson's for the slice's size (bootstrap noise of 200 resamples).
    width = record["intervals"]["accuracy"][1] - record["intervals"]["accuracy"][0]
    assert width == pytest.approx(2 * slices.Z95 * np.sqrt(0.65 * 0.35 / 1000), rel=0.3)


def test_a_planted_slice_is_found_and_random_slices_are_not():
    n = 6000
    rng = np.random.default_rng(5)
    planted = rng.uniform(size=n) < 0.1
    scores = _scores(n, seed=5, accuracy_drop=planted)
    columns = {
        "lighting": np.where(planted, "dark", "normal").astype(object),
        "random": rng.choice(np.array(["x", "y", "z"], dtype=object), n),
        "noise": rng.normal(size=n),
    }
    result = slices.analyse_slices(scores, slices.define_slices(columns, 5), resamples=0)
    worst = result["scored"][0]
    assert (worst["column"], worst["value"], worst["significant"]) == ("lighting", "dark", True)
    assert worst["gaps"]["accuracy"]["gap"] < -0.3
    flagged = {(r["column"], r["value"]) for r in result["scored"] if r["significant"]}
    assert flagged == {("lighting", "dark"), ("lighting", "normal")}  # the complement differs as much
    assert result["tests"] == 2 * len(result["scored"])


def test_random_columns_rarely_flag_anything():
    flagged = 0
    for seed in range(40):
        rng = np.random.default_rng(100 + seed)
        scores = _scores(4000, seed=100 + seed)
        columns = {"group": rng.choice(np.array(list("abcd"), dtype=object), 4000), "value": rng.normal(size=4000)}
        result = slices.analyse_slices(scores, slices.define_slices(columns, 5), resamples=0)
        flagged += any(r["significant"] for r in result["scored"])
    assert flagged <= 6  # 5% of 40 is 2; 6 or more has probability below 1.5% under a correct correction


def test_small_slices_are_listed_not_scored_and_the_whole_data_is_no_slice():
    scores = _scores(1000)
    column = np.array(["big"] * 950 + ["small"] * 50, dtype=object)
    result = slices.analyse_slices(scores, slices.define_slices({"c": column}, 5), min_size=100, resamples=0)
    # The big slice's rest is the 50 small images: too few to compare it with, so neither is tested.
    assert result["scored"] == [] and result["tests"] == 0
    assert result["small"] == [
        {"column": "c", "value": "big", "n": 950, "rest": "the other 50 images, fewer than 100"},
        {"column": "c", "value": "small", "n": 50},
    ]
    three = np.array(["a"] * 450 + ["b"] * 450 + ["small"] * 100, dtype=object)
    result = slices.analyse_slices(scores, slices.define_slices({"c": three}, 5), min_size=100, resamples=0)
    assert sorted(r["value"] for r in result["scored"]) == ["a", "b", "small"]
    everyone = slices.analyse_slices(scores, slices.define_slices({"c": np.array(["x"] * 1000, dtype=object)}, 5))
    assert everyone["scored"] == [] and everyone["small"][0]["n"] == 1000 and "rest" in everyone["small"][0]


def test_slices_are_named_apart_however_close_their_values():
    codes = slices.define_slices({"site": np.array([10001.0, 10002.0, 10003.0] * 4)}, 5)
    assert [s.value for s in codes] == ["10001", "10002", "10003"]
    close = slices.define_slices({"x": 1000 + np.linspace(0, 0.04, 40)}, 4)
    names = [s.value for s in close]
    assert len(set(names)) == 4 and names[0].startswith("[1000, 1000.0") and names[-1].endswith("1000.04]")


def test_multicalibration_error_is_the_largest_weighted_bin_gap_of_a_direct_loop():
    scores = _scores(2000, seed=7)
    rng = np.random.default_rng(7)
    column = rng.choice(np.array(list("abc"), dtype=object), 2000)
    cut = slices.define_slices({"c": column, "v": rng.normal(size=2000)}, 4)
    found = slices.multicalibration_error(scores.confidence, scores.correct.astype(float), cut, min_size=100)
    best = 0.0
    for members in [np.arange(2000)] + [s.members for s in cut]:
        for b in range(15):
            lo, hi = b / 15, (b + 1) / 15
            conf = scores.confidence[members]
            inside = (conf > lo) & (conf <= hi) if b else (conf <= hi)
            total = (conf[inside] - scores.correct[members][inside]).sum()
            best = max(best, abs(total) / len(members))
    assert found["error"] == pytest.approx(best, rel=1e-12)
    assert found["min_size"] == 100


def test_coverage_is_of_the_slices_scored_images():
    scores = _scores(1000)
    scored = np.arange(0, 1000, 2)
    covered = np.zeros(len(scored), dtype=bool)
    covered[: len(scored) // 2] = True  # the first half of the scored positions covered
    scores = slices.Scores(scores.confidence, scores.correct, scores.nll, {"lac": covered}, scored)
    column = np.where(np.arange(1000) < 500, "first", "second").astype(object)
    result = slices.analyse_slices(scores, slices.define_slices({"half": column}, 5), resamples=0)
    by_value = {r["value"]: r["coverage"]["lac"] for r in result["scored"]}
    assert by_value["first"]["coverage"] == 1.0 and by_value["first"]["n"] == 250
    assert by_value["second"]["coverage"] == 0.0


def test_settings_out_of_range_name_their_option():
    with pytest.raises(UsageError, match="--slice-bins"):
        slices.check_slice_settings(1, 100, "holm")
    with pytest.raises(UsageError, match="--min-slice-size"):
        slices.check_slice_settings(5, 1, "holm")
    with pytest.raises(UsageError, match="--slice-correction"):
        slices.check_slice_settings(5, 100, "none")


def test_a_slice_of_two_images_gets_finite_intervals_from_the_resamples_that_hold_it():
    scores = _scores(300, seed=2)
    column = np.array(["pair"] * 2 + ["rest"] * 298, dtype=object)
    result = slices.analyse_slices(scores, slices.define_slices({"c": column}, 5), min_size=2, resamples=200)
    pair = next(r for r in result["scored"] if r["value"] == "pair")
    # About e^-2 of the resamples draw neither image: they are left out, not turned into NaN.
    assert pair["intervals"] and all(np.isfinite(v).all() for v in pair["intervals"].values())
    assert 0 <= pair["intervals"]["accuracy"][0] <= pair["intervals"]["accuracy"][1] <= 1
