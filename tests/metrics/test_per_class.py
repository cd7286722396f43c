"""metrics/per_class.py: each class's n, accuracy, mean confidence and ECE, against hand-counted cases and the
view-level ECE of the same images."""

import numpy as np
import pytest

from macs_audit.metrics import accumulators
from macs_audit.metrics.per_class import binned_ece, per_class_stats


def test_each_class_is_scored_on_its_own_images():
    # Class 0: two images, both right; class 1: two, one right; class 2: none (no row).
    logits = np.array([[4.0, 0, 0], [3.0, 0, 0], [0, 2.0, 0], [1.0, 0, 0]], dtype=np.float32)
    labels = np.array([0, 0, 1, 1])
    rows = per_class_stats(logits, labels, ["cat", "dog", "emu"])
    assert [(r["name"], r["n"], r["accuracy"]) for r in rows] == [("cat", 2, 1.0), ("dog", 2, 0.5)]
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert rows[1]["mean_confidence"] == pytest.approx(p[2:].max(axis=1).mean())


def test_binned_ece_is_the_views_ece_on_the_same_images():
    rng = np.random.default_rng(0)
    logits = (3 * rng.normal(size=(400, 5))).astype(np.float32)
    labels = rng.integers(0, 5, 400)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ece = binned_ece(p.max(1), (p.argmax(1) == labels).astype(float))
    assert ece == pytest.approx(accumulators.calibration_metrics(logits, labels, 5)["ece"], abs=1e-9)
    one = per_class_stats(logits, labels)[0]
    mask = labels == 0
    assert one["ece"] == pytest.approx(accumulators.calibration_metrics(logits[mask], labels[mask], 5)["ece"], abs=1e-9)


def test_the_lac_sets_coverage_is_counted_per_class_on_the_scored_images():
    from macs_audit.metrics.conformal import SplitConformal, prediction_sets
    from macs_audit.metrics.conventions import softmax_with_log

    rng = np.random.default_rng(1)
    labels = np.repeat(np.arange(3), 40)
    logits = (rng.normal(size=(120, 3)) + 1.5 * np.eye(3)[labels]).astype(np.float32)
    order = rng.permutation(120)
    sets = SplitConformal.fit(logits, labels, fit=order[:60], scored=order[60:], coverage=0.9)
    rows = per_class_stats(logits, labels, sets=sets)
    held = prediction_sets(softmax_with_log(logits[order[60:]])[0], sets.thresholds["lac"], "lac")
    covered = held[np.arange(60), labels[order[60:]]]
    for row in rows:
        mask = labels[order[60:]] == row["class"]
        assert row["n_coverage"] == mask.sum() and row["coverage"] == pytest.approx(covered[mask].mean())
    assert "coverage" not in per_class_stats(logits, labels)[0]  # no sets: no coverage
