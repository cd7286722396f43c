"""Bootstrap intervals: every resampled metric equals the metric of the resampled data set, the draws are
the documented ones, and the bias-corrected intervals cover a known calibration error where the
percentile intervals do not."""

import numpy as np
import pytest

from macs_audit.metrics import bootstrap, estimators
from macs_audit.metrics.accumulators import CalibrationAccumulator, calibration_metrics


def binary_case(n, gap, seed):
    """Two-class logits whose top-label confidence c is uniform on [0.5, 1) and right with probability
    c - gap: every calibration error of this distribution is exactly `gap` (constant over confidence)."""
    rng = np.random.default_rng(seed)
    confidence = rng.uniform(0.5, 1.0, n)
    correct = rng.random(n) < confidence - gap
    logits = np.column_stack([np.log(confidence), np.log1p(-confidence)])
    return logits, np.where(correct, 0, 1)


def accumulated(logits, labels):
    acc = CalibrationAccumulator(logits.shape[1])
    acc.update(logits, labels)
    return acc


def test_each_resampled_metric_is_the_metric_of_the_resampled_data():
    """A resample is a data set in which sample i appears counts[i] times: recompute every metric on that
    data set written out (np.repeat) and compare."""
    rng = np.random.default_rng(4)
    logits = (rng.normal(size=(300, 5)) * 2.5).astype(np.float32)
    labels = rng.integers(0, 5, 300)
    resampled = bootstrap.resampled_metrics(accumulated(logits, labels), 6, seed=9)
    draws = np.random.default_rng(9).integers(0, 300, size=(6, 300))  # the documented draws, one chunk
    for row, index in enumerate(draws):
        expected = calibration_metrics(logits[index], labels[index], 5)
        for name in bootstrap.MEAN_METRICS + bootstrap.ERROR_METRICS:
            assert resampled[name][row] == pytest.approx(expected[name], rel=1e-9, abs=1e-12), name


def test_pieces_in_threads_give_the_values_of_one_thread(monkeypatch):
    """The pieces run two at a time where two cores are free: the same resampled values as one after another."""
    from macs_audit.metrics import resampling

    rng = np.random.default_rng(2)
    logits = (rng.normal(size=(3_000, 10)) * 3).astype(np.float32)
    acc = accumulated(logits, rng.integers(0, 10, 3_000))
    monkeypatch.setattr(resampling, "COUNTS_PER_PIECE", 30_000)  # ten rows a piece: 20 pieces
    monkeypatch.setattr(bootstrap, "piece_threads", lambda: 2)
    threaded = bootstrap.resampled_metrics(acc, 200, seed=5)
    monkeypatch.setattr(bootstrap, "piece_threads", lambda: 1)
    one = bootstrap.resampled_metrics(acc, 200, seed=5)
    for name in bootstrap.MEAN_METRICS + bootstrap.ERROR_METRICS:
        np.testing.assert_array_equal(threaded[name], one[name], err_msg=name)


def test_sorted_prefix_sums_match_the_written_out_data_set():
    rng = np.random.default_rng(1)
    confidence = rng.choice([0.3, 0.5, 0.7, 0.9], 40)  # ties, broken by correctness
    correct = rng.random(40) < 0.6
    counts = rng.multinomial(40, np.full(40, 1 / 40), size=3).astype(np.float64)
    prefix = estimators.SortedPrefix(confidence, correct, counts)
    positions = np.arange(41)
    conf_sums, hit_sums = prefix.sums(positions)
    for row in range(3):
        expanded = np.repeat(np.arange(40), counts[row].astype(int))
        order = estimators.sorted_order(confidence[expanded], correct[expanded])
        conf, hit = confidence[expanded][order], correct[expanded][order]
        assert conf_sums[row] == pytest.approx(np.concatenate([[0], np.cumsum(conf)]))
        assert hit_sums[row] == pytest.approx(np.concatenate([[0], np.cumsum(hit)]))
    subset = prefix.sums(positions, np.array([2, 0]))
    assert subset[0] == pytest.approx(conf_sums[[2, 0]])


def test_intervals_are_seeded_and_mean_intervals_contain_the_estimate():
    logits, labels = binary_case(400, 0.05, seed=3)
    acc = accumulated(logits, labels)
    estimates = acc.compute()
    a = bootstrap.bootstrap_intervals(acc, 200, seed=1)
    assert a == bootstrap.bootstrap_intervals(acc, 200, seed=1, estimates=estimates)
    assert a != bootstrap.bootstrap_intervals(acc, 200, seed=2)
    assert set(a) == set(bootstrap.MEAN_METRICS + bootstrap.ERROR_METRICS)  # no classwise ECE interval
    for name, (low, high) in a.items():
        assert low <= estimates[name] <= high, name
        assert low < high, name


def test_the_rms_calibration_error_has_an_interval_from_200_samples():
    logits, labels = binary_case(400, 0.05, seed=3)
    big = bootstrap.bootstrap_intervals(accumulated(logits, labels), 100, seed=1)
    low, high = big["rms_calibration_error"]
    assert 0 <= low < high
    small = bootstrap.bootstrap_intervals(accumulated(logits[:199], labels[:199]), 100, seed=1)
    assert "rms_calibration_error" not in small and "l2_ece" in small


def test_one_sample_gives_no_interval_and_says_why():
    """One sample resampled is always itself: a zero-width interval would claim certainty."""
    acc = accumulated(np.array([[2.0, 0.0, 0.0]]), np.array([0]))
    assert bootstrap.bootstrap_intervals(acc, 100) == {}
    assert bootstrap.bootstrap_note(1, 100) == "no intervals: a bootstrap needs at least 2 samples, got 1"
    assert bootstrap.bootstrap_note(1, 0) is None and bootstrap.bootstrap_note(2, 100) is None
    acc.update(np.array([[0.0, 2.0, 0.0]]), np.array([0]))
    assert all(np.isfinite(bootstrap.bootstrap_intervals(acc, 100)["nll"]))


def coverage(gap, n, repeats, resamples, names):
    """How often the percentile and the bias-corrected 95% intervals contain the true error `gap`."""
    hits = {name: np.zeros(2) for name in names}
    for repeat in range(repeats):
        acc = accumulated(*binary_case(n, gap, seed=100 + repeat))
        estimates = acc.compute()
        resampled = bootstrap.resampled_metrics(acc, resamples, seed=repeat)
        for name in names:
            for column, (low, high) in enumerate(
                (
                    bootstrap.percentile_interval(resampled[name]),
                    bootstrap.bias_corrected_interval(estimates[name], resampled[name]),
                )
            ):
                hits[name][column] += low <= gap <= high
    return {name: tuple(h / repeats) for name, h in hits.items()}


def test_bias_corrected_intervals_cover_a_known_calibration_error():
    """True error 0.02 on 2,000 samples: the binned ECE's percentile interval sits above the truth (its
    resamples are biased upwards twice), the bias-corrected one covers it at about its nominal level.
    (Seeded. These 40 repeats give percentile -> bias-corrected coverage 0.48 -> 0.88 for the ECE, 0.45 -> 0.80
    smooth ECE, 0.78 -> 0.95 debiased L2, 0.78 -> 0.90 ECE-sweep; 100 repeats: 0.64 -> 0.91, 0.48 -> 0.85,
    0.83 -> 0.97, 0.86 -> 0.89.)"""
    names = ("ece", "smooth_ece", "debiased_l2_ece", "ece_sweep")
    result = coverage(0.02, 2000, repeats=40, resamples=100, names=names)
    for name in names:
        percentile, corrected = result[name]
        assert corrected >= 0.75, (name, result)
        assert corrected >= percentile, (name, result)
    assert result["ece"][1] - result["ece"][0] >= 0.15, result


def test_a_perfectly_calibrated_sampler_gives_estimates_near_zero_inside_their_intervals():
    """True error 0: every estimate is small and inside its own interval; the debiased L2 ECE, whose bias
    is removed, has intervals that reach the true 0 (the L1 estimators' bias at 0 is as large as their
    noise, which one bootstrap correction does not remove: docs/method.md says so)."""
    n = 4000
    covered = 0
    for repeat in range(10):
        acc = accumulated(*binary_case(n, 0.0, seed=repeat))
        estimates = acc.compute()
        intervals = bootstrap.bootstrap_intervals(acc, 100, seed=repeat, estimates=estimates)
        for name in bootstrap.ERROR_METRICS:
            if name == "rms_calibration_error":  # bins of 100 whatever n: a bin's noise, sqrt(p (1 - p) / 100)
                assert estimates[name] < 1.5 * 0.5 / np.sqrt(100), (name, estimates[name])
            elif name != "mce":  # the largest bin gap is not an average: its noise is the worst bin's
                assert estimates[name] < 3 / np.sqrt(n), (name, estimates[name])
            low, high = intervals[name]
            assert low <= estimates[name] <= high, name
        covered += intervals["debiased_l2_ece"][0] == 0.0
    assert covered >= 8
