"""Scores against ReaL's multi-label ground truth, each checked by hand on a few images."""

import numpy as np
import pytest

from macs_audit.metrics.real_labels import real_scores
from macs_audit.metrics.rms_calibration import rms_calibration_error


def test_any_real_label_is_right_and_unlabelled_images_are_left_out():
    logits = np.log(
        np.array(
            [
                [0.7, 0.2, 0.1],  # top-1 0: original label 1 (wrong), ReaL {0, 1} (right)
                [0.1, 0.8, 0.1],  # top-1 1: original 1, ReaL {2}: right, then wrong
                [0.5, 0.3, 0.2],  # no ReaL label: left out
                [0.2, 0.2, 0.6],  # top-1 2: original 2, ReaL {2}
            ]
        )
    )
    scores = real_scores(logits, np.array([1, 1, 0, 2]), [[0, 1], [2], [], [2]])
    assert (scores["n"], scores["n_without_labels"]) == (3, 1)
    assert scores["accuracy_real"] == pytest.approx(2 / 3)
    assert scores["accuracy_original"] == pytest.approx(2 / 3)
    # 15 equal-width bins: 0.6 (bin 8), 0.7 (bin 10), 0.8 (bin 11), each alone: ECE = mean |hit - confidence|.
    confidence = np.array([0.7, 0.8, 0.6])
    assert scores["ece_real"] == pytest.approx(np.mean(np.abs(np.array([1, 0, 1]) - confidence)))
    assert scores["ece_original"] == pytest.approx(np.mean(np.abs(np.array([0, 1, 1]) - confidence)))
    assert "rms_calibration_error_real" not in scores  # fewer than 200 images


def test_the_rms_error_against_real_and_no_labelled_image():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(300, 5))
    sets = [[int(i)] if k % 4 else [] for k, i in enumerate(rng.integers(0, 5, 300))]
    scores = real_scores(logits, np.zeros(300, dtype=np.int64), sets)
    keep = np.array([bool(s) for s in sets])
    p = np.exp(logits[keep]) / np.exp(logits[keep]).sum(axis=1, keepdims=True)
    right = p.argmax(axis=1) == np.array([s[0] for s in sets if s])
    assert scores["rms_calibration_error_real"] == pytest.approx(rms_calibration_error(p.max(axis=1), right))
    assert real_scores(logits[:2], np.zeros(2, dtype=np.int64), [[], []]) == {"n": 0, "n_without_labels": 2}


def test_the_intervals_are_the_scores_of_each_resample():
    """Each resample's accuracies and ECEs as real_scores computes them on the resampled images themselves."""
    from macs_audit.metrics.resampling import draw_counts

    rng = np.random.default_rng(1)
    logits = rng.normal(size=(120, 4)) * 2
    labels = rng.integers(0, 4, 120)
    sets = [[int(y), int((y + 1) % 4)] for y in labels]
    scores = real_scores(logits, labels, sets, resamples=40, seed=5)
    assert scores["bootstrap_resamples"] == 40 and set(scores["intervals"]) == {
        "accuracy_real",
        "accuracy_original",
        "ece_real",
        "ece_original",
    }
    direct = {key: [] for key in scores["intervals"]}
    for counts in draw_counts(120, 40, np.random.default_rng(5)):
        for row in counts:
            pick = np.repeat(np.arange(120), row.astype(int))
            again = real_scores(logits[pick], labels[pick], [sets[i] for i in pick])
            for key in direct:
                direct[key].append(again[key])
    for key, (low, high) in scores["intervals"].items():
        assert low == pytest.approx(np.quantile(direct[key], 0.025)) and high == pytest.approx(
            np.quantile(direct[key], 0.975)
        )
        assert low <= scores[key] <= high or key.startswith("ece")  # an ECE's resamples sit above it (its bias)
