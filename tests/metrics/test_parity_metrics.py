"""Parity metrics (metrics/parity.py) against direct numpy computations: agreement and flips, the paired
intervals as the percentiles of the metric differences on explicitly drawn resamples (the candidate's own
bootstrap's, the reference's statistics paired with it), conformal sets at each model's threshold; a model
against itself gives exactly zero."""

import numpy as np
import pytest

from macs_audit.metrics import bootstrap, conformal, parity, resampling
from macs_audit.metrics.accumulators import CalibrationAccumulator, calibration_metrics


def pair(n=400, k=5, seed=0, noise=0.4):
    rng = np.random.default_rng(seed)
    reference = (rng.normal(size=(n, k)) * 2.0).astype(np.float32)
    candidate = (reference + rng.normal(0, noise, size=(n, k))).astype(np.float32)
    labels = np.where(rng.random(n) < 0.7, reference.argmax(axis=1), rng.integers(0, k, n))
    return reference, candidate, labels


def accumulated(logits, labels):
    acc = CalibrationAccumulator(logits.shape[1])
    acc.update(logits, labels)
    return acc


def paired_differences(reference, candidate, resamples, seed, *, errors=True, columns=None):
    """As auditing/parity.py pairs them: the paired statistic on the counts and values of the candidate's own
    bootstrap (without errors: metric_differences, the means on draws of the same seed)."""
    if not errors:
        return parity.metric_differences(reference, candidate, resamples, seed, errors=False, columns=columns)
    statistic = parity.paired_statistic(reference, candidate, errors=errors, columns=columns)
    _, resampled = bootstrap.paired_bootstrap(candidate, resamples, seed, statistic)
    out = parity.differences(reference.compute(), candidate.compute(), resampled)
    return out, {name: parity.column_interval(resampled[name]) for name in columns or {}}


def test_agreement_and_flips_against_numpy():
    reference, candidate, labels = pair()
    summary = parity.agreement_summary(parity.agreement(reference, candidate, labels))
    a, b = reference.argmax(1), candidate.argmax(1)
    assert summary["agreement"] == pytest.approx(np.mean(a == b))
    assert summary["correct_to_wrong"] == np.sum((a == labels) & (b != labels))
    assert summary["wrong_to_correct"] == np.sum((a != labels) & (b == labels))
    gap = np.abs(candidate.astype(np.float64) - reference)
    assert summary["mean_abs_logit_difference"] == pytest.approx(gap.mean())
    assert summary["max_abs_logit_difference"] == pytest.approx(gap.max())
    p = np.exp(reference - reference.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    q = np.exp(candidate - candidate.max(1, keepdims=True))
    q /= q.sum(1, keepdims=True)
    assert summary["mean_kl"] == pytest.approx(np.mean((p * np.log(p / q)).sum(1)), rel=1e-6)
    assert 0 < summary["agreement"] < 1 and summary["correct_to_wrong"] > 0


def test_paired_intervals_are_the_percentiles_of_the_differences_on_shared_resamples():
    reference, candidate, labels = pair(n=300)
    n, resamples, seed = len(labels), 40, 7
    agree = (reference.argmax(1) == candidate.argmax(1)).astype(float)
    ref_acc, cand_acc = accumulated(reference, labels), accumulated(candidate, labels)
    out, columns = paired_differences(ref_acc, cand_acc, resamples, seed, columns={"agree": agree})
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # the documented draws, one chunk
    ref, cand = calibration_metrics(reference, labels, 5), calibration_metrics(candidate, labels, 5)
    for name in parity.DIFFERENCE_METRICS:
        estimate = cand[name] - ref[name]
        resampled = np.array(
            [
                calibration_metrics(candidate[i], labels[i], 5)[name]
                - calibration_metrics(reference[i], labels[i], 5)[name]
                for i in draws
            ]
        )
        expected = np.quantile(resampled, [0.025, 0.975])
        if name in ("ece", "smooth_ece"):
            expected = expected - (resampled.mean() - estimate)
        assert out[name]["difference"] == pytest.approx(estimate)
        assert out[name]["interval"] == pytest.approx(list(expected), abs=1e-9), name
    assert columns["agree"] == pytest.approx(list(np.quantile(agree[draws].mean(axis=1), [0.025, 0.975])))
    means_only, _ = paired_differences(ref_acc, cand_acc, resamples, seed, errors=False)
    for name in ("accuracy", "nll", "brier"):
        assert means_only[name]["interval"] == pytest.approx(out[name]["interval"], abs=1e-12)
    assert means_only["ece"]["interval"] is None


def test_a_model_against_itself_differs_by_exactly_zero():
    reference, _, labels = pair()
    out, _ = paired_differences(accumulated(reference, labels), accumulated(reference.copy(), labels), 50, 3)
    for name, entry in out.items():
        assert entry["difference"] == 0.0 and entry["interval"] == [0.0, 0.0], name
    thresholds = conformal.fit_thresholds(reference[:200], labels[:200], 0.9)
    within = np.arange(len(labels)) >= 200
    sets, columns = parity.conformal_sets(
        reference, reference.copy(), labels, {"reference": thresholds, "candidate": thresholds}, within
    )
    parity.add_set_intervals(
        sets, resampling.resampled(len(labels), 50, 3, parity.column_means(columns, dict.fromkeys(columns, within)))
    )
    for method in conformal.METHODS:
        for entry in sets[method]["differences"].values():
            assert entry == {"difference": 0.0, "interval": [0.0, 0.0]}
    summary = parity.agreement_summary(parity.agreement(reference, reference.copy(), labels))
    assert summary["agreement"] == 1.0 and summary["mean_kl"] == 0.0 and summary["max_abs_logit_difference"] == 0.0


def test_conformal_sets_at_both_thresholds_against_numpy():
    reference, candidate, labels = pair(n=600, noise=1.0)
    fit, scored = np.arange(300), np.arange(300, 600)
    within = np.zeros(600, dtype=bool)
    within[scored] = True
    thresholds = {
        "reference": conformal.fit_thresholds(reference[fit], labels[fit], 0.9),
        "candidate": conformal.fit_thresholds(candidate[fit], labels[fit], 0.9),
    }
    out, columns = parity.conformal_sets(reference, candidate, labels, thresholds, within)
    parity.add_set_intervals(
        out, resampling.resampled(600, 30, 1, parity.column_means(columns, dict.fromkeys(columns, within)))
    )
    for method in conformal.METHODS:
        stats = conformal.evaluate_sets(reference[scored], labels[scored], thresholds["reference"])[method]
        at_ref = conformal.evaluate_sets(candidate[scored], labels[scored], thresholds["reference"])[method]
        at_own = conformal.evaluate_sets(candidate[scored], labels[scored], thresholds["candidate"])[method]
        entry = out[method]
        assert entry["reference"]["coverage"] == pytest.approx(stats["coverage"])
        assert entry["candidate_at_reference_threshold"]["mean_set_size"] == pytest.approx(at_ref["mean_set_size"])
        assert entry["candidate_at_own_threshold"]["coverage"] == pytest.approx(at_own["coverage"])
        drop = entry["differences"]["coverage_at_reference_threshold"]
        assert drop["difference"] == pytest.approx(at_ref["coverage"] - stats["coverage"])
        low, high = drop["interval"]
        assert low <= drop["difference"] <= high


def test_column_means_over_some_images_use_their_draws():
    rng = np.random.default_rng(2)
    column, within = rng.random(100), rng.random(100) < 0.4
    draws = np.random.default_rng(5).integers(0, 100, size=(30, 100))
    counts = np.stack([np.bincount(d, minlength=100) for d in draws]).astype(np.float64)
    means = parity.column_means({"x": column, "y": 2 * column, "z": column}, {"x": within, "y": within})(counts)
    expected = [(column[d] * within[d]).sum() / within[d].sum() for d in draws]
    np.testing.assert_allclose(means["x"], expected, rtol=1e-12)
    np.testing.assert_allclose(means["y"], 2 * np.asarray(expected), rtol=1e-12)
    np.testing.assert_allclose(means["z"], column[draws].mean(axis=1), rtol=1e-12)  # over every image
    everywhere = parity.column_means({"x": column})(counts)["x"]
    np.testing.assert_allclose(everywhere, column[draws].mean(axis=1), rtol=1e-12)
    assert parity.column_interval(np.array([np.nan, 0.2, 0.4])) == pytest.approx([0.205, 0.395])
    assert parity.column_interval(np.array([np.nan])) is None


def test_two_audits_outputs_paired_afterwards_use_the_same_draws():
    """metric_differences (before/after audits): both models resampled on the draws of one seed."""
    reference, candidate, labels = pair(n=300)
    ref_acc, cand_acc = accumulated(reference, labels), accumulated(candidate, labels)
    agree = (reference.argmax(1) == candidate.argmax(1)).astype(float)
    out, columns = parity.metric_differences(ref_acc, cand_acc, 40, 7, columns={"agree": agree})
    expected, expected_columns = paired_differences(ref_acc, cand_acc, 40, 7, columns={"agree": agree})
    for name in parity.DIFFERENCE_METRICS:
        assert out[name]["interval"] == pytest.approx(expected[name]["interval"], abs=1e-12), name
    assert columns == expected_columns
    itself, _ = parity.metric_differences(ref_acc, accumulated(reference.copy(), labels), 30, 1)
    assert all(entry["interval"] == [0.0, 0.0] for entry in itself.values())
    none, no_columns = parity.metric_differences(ref_acc, cand_acc, 0, 7, columns={"agree": agree})
    assert all(entry["interval"] is None for entry in none.values()) and no_columns == {}
