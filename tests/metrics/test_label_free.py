"""ATC and DoC: definitions by hand, and known answers: on a target drawn like the source (the sample model's
held-out half) the estimates recover the true accuracy; under a shift that keeps the calibration they follow it."""

import math

import numpy as np
import pytest

from macs_audit.metrics import label_free


def test_atc_threshold_keeps_the_accuracy_share_of_source_scores():
    scores = np.array([0.2, 0.4, 0.6, 0.8, 0.9])
    correct = np.array([False, True, False, True, True])  # 2 errors: t = the 3rd smallest
    t = label_free.atc_threshold(scores, correct)
    assert t == 0.6 and (scores >= t).mean() == correct.mean()
    assert label_free.atc_threshold(scores, np.zeros(5, bool)) == math.inf


def test_estimates_by_hand():
    source = np.log(np.array([[0.9, 0.1], [0.6, 0.4], [0.8, 0.2], [0.3, 0.7]]))
    labels = np.array([0, 1, 0, 1])  # the second is wrong: accuracy 3/4
    target = np.log(np.array([[0.95, 0.05], [0.55, 0.45], [0.5, 0.5], [0.7, 0.3]]))
    out = label_free.estimates(source, labels, target, n_resamples=0, seed=0)
    assert out["atc_mc"]["threshold"] == pytest.approx(0.7)  # sorted source confidences 0.6, 0.7, ...
    assert out["atc_mc"]["accuracy"] == pytest.approx(2 / 4)  # 0.95 and 0.7 reach it
    source_conf, target_conf = np.mean([0.9, 0.6, 0.8, 0.7]), np.mean([0.95, 0.55, 0.5, 0.7])
    assert out["doc"]["accuracy"] == pytest.approx(0.75 + target_conf - source_conf)
    assert out["doc"]["interval"] is None


def test_same_distribution_target_recovers_the_accuracy(sample_split):
    z_src, y_src, z_tgt, y_tgt = sample_split
    true = float((z_tgt.argmax(axis=1) == y_tgt).mean())
    out = label_free.estimates(z_src, y_src, z_tgt, n_resamples=200, seed=0)
    for name in label_free.ESTIMATORS:
        assert out[name]["accuracy"] == pytest.approx(true, abs=0.03), name
        low, high = out[name]["interval"]
        assert low <= out[name]["accuracy"] <= high


def test_a_shift_that_keeps_the_calibration():
    """A synthetic model calibrated on both sets (labels drawn from its own softmax of per-input scaled logits);
    the target has fewer confident inputs, so the model is less accurate there. DoC is exact in expectation for a
    calibrated model (accuracy = mean confidence); ATC is not, but ATC-MC follows a mild shift closely."""
    rng = np.random.default_rng(0)

    def draw(n, top_scale):
        z = rng.normal(size=(n, 10)) * rng.uniform(0.5, top_scale, size=(n, 1))
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        y = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
        return z, y

    z_src, y_src = draw(20_000, 5.0)
    z_tgt, y_tgt = draw(20_000, 4.0)
    true = float((z_tgt.argmax(axis=1) == y_tgt).mean())
    out = label_free.estimates(z_src, y_src, z_tgt, n_resamples=0, seed=0)
    source = float((z_src.argmax(axis=1) == y_src).mean())
    assert source - true > 0.04  # a real shift
    assert out["doc"]["accuracy"] == pytest.approx(true, abs=0.015)
    assert out["atc_mc"]["accuracy"] == pytest.approx(true, abs=0.04)
    assert out["atc_ne"]["accuracy"] < source  # this synthetic shift is not ATC-NE's strength: it over-shoots


def test_intervals_repeat_by_seed(sample_split):
    z_src, y_src, z_tgt, _ = sample_split
    a = label_free.estimates(z_src, y_src, z_tgt, 100, seed=1)
    assert a == label_free.estimates(z_src, y_src, z_tgt, 100, seed=1)
    assert a != label_free.estimates(z_src, y_src, z_tgt, 100, seed=2)


def test_with_a_temperature_both_fit_on_the_scaled_scores(sample_split):
    """Given T, every estimate is the one of logits / T (source and target), and says which T."""
    z_fit, y_fit, z_eval, _ = sample_split
    scaled = label_free.estimates(z_fit, y_fit, z_eval, 0, 0, temperature=1.7)
    direct = label_free.estimates(z_fit / 1.7, y_fit, z_eval / 1.7, 0, 0)
    raw = label_free.estimates(z_fit, y_fit, z_eval, 0, 0)
    for name in label_free.ESTIMATORS:
        assert scaled[name]["temperature"] == 1.7 and raw[name]["temperature"] is None
        assert scaled[name]["accuracy"] == direct[name]["accuracy"]
    assert scaled["doc"]["offset"] != raw["doc"]["offset"]  # the scaled confidences differ from the raw ones
