"""The before/after comparison of calibrate and finetune: paired intervals of after - before from both models'
clean outputs on the same images, and the comparison judged on them."""

from __future__ import annotations

import numpy as np
from fixtures.synthetic_report import synthetic_report

from macs_audit.before_after import AFTER, BEFORE, paired_intervals
from macs_audit.compare import PAIRED, compare


def _overconfident(n: int = 600, k: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, n)
    logits = rng.normal(0, 1, (n, k))
    logits[np.arange(n), labels] += 1.5  # about 70% correct
    return (4 * logits).astype(np.float32), labels  # sharpened: confident beyond its accuracy


def test_the_same_model_twice_is_the_same_on_a_paired_interval_of_zero():
    logits, labels = _overconfident()
    report = synthetic_report()
    intervals = paired_intervals(report, report, {BEFORE: (logits, labels), AFTER: (logits.copy(), labels)})
    assert set(intervals) == {"accuracy", "ece", "smooth_ece", "nll", "brier"}
    for low, high in intervals.values():
        assert abs(low) < 1e-9 and abs(high) < 1e-9


def test_temperature_scaling_is_better_on_ece_and_the_same_on_accuracy():
    logits, labels = _overconfident()
    before, after = synthetic_report(ece=0.08), synthetic_report(ece=0.02)  # the reports' own numbers
    intervals = paired_intervals(before, after, {BEFORE: (logits, labels), AFTER: (logits / 4, labels)})
    rows = {r.key: r for r in compare(before, after, paired=intervals).rows}
    assert rows["ece"].basis == PAIRED and rows["ece"].status == "better"
    assert rows["accuracy"].basis == PAIRED and rows["accuracy"].status == "same"  # argmax unchanged


def test_no_paired_intervals_without_both_outputs_on_the_same_images():
    logits, labels = _overconfident()
    report = synthetic_report()
    assert paired_intervals(report, report, None) == {}
    assert paired_intervals(report, report, {BEFORE: (logits, labels)}) == {}
    other = _overconfident(seed=1)
    assert paired_intervals(report, report, {BEFORE: (logits, labels), AFTER: other}) == {}
