"""Every metric against an independent reference (torchmetrics, scikit-learn, hand-computed cases)."""

import numpy as np
import pytest
import torch
from sklearn.metrics import brier_score_loss, log_loss
from torchmetrics.functional.classification import multiclass_calibration_error

from macs_audit.calibrators.temperature import optimal_temperature
from macs_audit.data.splits import stratified_split
from macs_audit.metrics import accumulators, conventions
from macs_audit.metrics.accumulators import (
    CalibrationAccumulator,
    bin_index,
    calibration_metrics,
)


def random_case(n, k, seed, scale=3.0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(n, k)) * scale).astype(np.float32)
    labels = rng.integers(0, k, size=n)
    return logits, labels


def probs64(logits):
    return conventions.softmax_with_log(logits)[0]


@pytest.mark.parametrize("n,k,seed", [(500, 10, 0), (1000, 3, 1), (200, 100, 2), (7, 5, 3)])
def test_ece_and_mce_match_torchmetrics(n, k, seed):
    # Random float confidences never sit on a bin edge or at 1.0, where the conventions differ.
    logits, labels = random_case(n, k, seed)
    p = torch.from_numpy(probs64(logits))
    y = torch.from_numpy(labels)
    m = calibration_metrics(logits, labels, k)
    ref_ece = multiclass_calibration_error(p, y, num_classes=k, n_bins=15, norm="l1").item()
    ref_mce = multiclass_calibration_error(p, y, num_classes=k, n_bins=15, norm="max").item()
    assert m["ece"] == pytest.approx(ref_ece, abs=1e-6)
    assert m["mce"] == pytest.approx(ref_mce, abs=1e-6)


@pytest.mark.parametrize("n,k,seed", [(500, 10, 0), (50, 4, 5), (1, 3, 6)])
def test_nll_and_brier_match_sklearn(n, k, seed):
    logits, labels = random_case(n, k, seed)
    p = probs64(logits)
    m = calibration_metrics(logits, labels, k)
    assert m["nll"] == pytest.approx(log_loss(labels, p, labels=list(range(k))), rel=1e-9)
    # scikit-learn's multiclass Brier is the sum over classes (scale_by_half=False), our convention.
    assert m["brier"] == pytest.approx(
        brier_score_loss(labels, p, labels=list(range(k)), scale_by_half=False), rel=1e-9
    )
    assert m["accuracy"] == pytest.approx((p.argmax(1) == labels).mean())


def test_bin_edges_follow_lo_hi_closed_convention():
    edges = np.linspace(0, 1, 16)
    # A confidence exactly on an edge b/15 belongs to the bin that ends there; 0 -> first, 1 -> last.
    assert bin_index(edges).tolist() == [0] + list(range(15))
    assert bin_index(np.array([0.0, 1e-12, 1.0, np.nextafter(1 / 15, 1)])).tolist() == [0, 0, 14, 1]


def test_confidence_one_goes_to_last_bin_not_an_extra_bin():
    # Logits so far apart that float64 softmax saturates at exactly 1.0.
    logits = np.array([[1000.0, 0.0, 0.0], [0.0, 1000.0, 0.0]], dtype=np.float32)
    labels = np.array([0, 0])
    acc = CalibrationAccumulator(3)
    acc.update(logits, labels)
    m = acc.compute()
    assert acc.bin_count.tolist() == [0] * 14 + [2]
    # One right with confidence 1, one wrong with confidence 1: |0.5 - 1| = 0.5.
    assert m["ece"] == pytest.approx(0.5)
    assert m["mce"] == pytest.approx(0.5)


def test_confidence_on_an_interior_edge():
    # Equal logits over 3 classes: confidence 1/3 = 5/15 exactly, the upper edge of bin 4.
    logits = np.zeros((4, 3), dtype=np.float32)
    labels = np.array([0, 1, 2, 0])  # argmax is class 0: two right, two wrong
    acc = CalibrationAccumulator(3)
    acc.update(logits, labels)
    assert acc.bin_count[4] == 4
    assert acc.compute()["ece"] == pytest.approx(abs(0.5 - 1 / 3))


def test_single_sample():
    logits = np.array([[2.0, 0.0]], dtype=np.float32)
    conf = 1 / (1 + np.exp(-2.0))
    m = calibration_metrics(logits, np.array([1]), 2)
    assert m["accuracy"] == 0
    assert m["ece"] == pytest.approx(conf)
    assert m["adaptive_ece"] == pytest.approx(conf)
    assert m["nll"] == pytest.approx(-np.log(1 - conf))
    assert m["mean_margin"] == pytest.approx(-2.0)
    assert m["frac_margin_below_target"] == 1.0


def test_absent_class_uses_declared_class_count():
    logits, _ = random_case(300, 5, 7)
    labels = np.random.default_rng(0).integers(0, 2, 300)  # classes 2..4 never appear
    m = calibration_metrics(logits, labels, 5)
    p = torch.from_numpy(probs64(logits))
    ref = multiclass_calibration_error(p, torch.from_numpy(labels), num_classes=5, n_bins=15, norm="l1").item()
    assert m["ece"] == pytest.approx(ref, abs=1e-6)
    assert m["nll"] == pytest.approx(log_loss(labels, p.numpy(), labels=list(range(5))), rel=1e-9)


def test_classwise_ece_hand_computed():
    # Two samples, two classes: p = (0.8, 0.2) label 0, and (0.3, 0.7) label 0.
    logits = np.log(np.array([[0.8, 0.2], [0.3, 0.7]]))
    m = calibration_metrics(logits, np.array([0, 0]), 2)
    # Class 0: 0.8 -> bin 11, hit 1; 0.3 -> bin 4, hit 1. Gaps |1-0.8| + |1-0.3| = 0.9.
    # Class 1: 0.2 -> bin 2, hit 0; 0.7 -> bin 10, hit 0. Gaps 0.2 + 0.7 = 0.9.
    assert m["classwise_ece"] == pytest.approx((0.9 + 0.9) / 2 / 2)


@pytest.mark.parametrize(("n", "k", "scale"), [(400, 10, 3.0), (300, 2, 5.0), (300, 100, 0.01), (200, 1000, 8.0)])
def test_classwise_bins_are_every_probabilitys_bin(n, k, scale):
    """The per-class bins against every (sample, class) probability binned directly: also where no probability
    leaves the first bin (100 near-uniform classes) and where most rows have one above it (1,000 classes)."""
    logits, labels = random_case(n, k, seed=k, scale=scale)
    acc = CalibrationAccumulator(k)
    acc.update(logits, labels)
    p = probs64(logits)
    flat = (np.arange(k)[None, :] * 15 + bin_index(p)).ravel()
    hits = (labels[:, None] == np.arange(k)[None, :]).ravel()
    np.testing.assert_array_equal(acc.class_bin_count, np.bincount(flat, minlength=k * 15).reshape(k, 15))
    np.testing.assert_array_equal(acc.class_bin_hit_sum, np.bincount(flat, hits, minlength=k * 15).reshape(k, 15))
    prob_sum = np.bincount(flat, p.ravel(), minlength=k * 15).reshape(k, 15)
    assert acc.class_bin_prob_sum.dtype == np.float64
    np.testing.assert_allclose(acc.class_bin_prob_sum, prob_sum, rtol=1e-12, atol=1e-12 * n)


def test_adaptive_ece_hand_computed():
    conf = np.array([0.9, 0.6, 0.95, 0.55])
    hit = np.array([True, False, True, True])
    # 15 bins but 4 samples: one sample per bin; sorted (0.55 T) (0.6 F) (0.9 T) (0.95 T)
    expected = (0.45 + 0.6 + 0.1 + 0.05) / 4
    assert accumulators.adaptive_ece(conf, hit) == pytest.approx(expected)
    # 30 samples -> 15 groups of two, contiguous in sorted order
    conf = np.linspace(0.5, 0.99, 30)
    hit = np.arange(30) % 2 == 0
    groups = [(abs(hit[i : i + 2].sum() - conf[i : i + 2].sum())) for i in range(0, 30, 2)]
    assert accumulators.adaptive_ece(conf, hit) == pytest.approx(sum(groups) / 30)


def test_every_view_holds_the_rms_calibration_error_beside_the_l2_ece():
    """The shift papers' rule on any view's metrics: bins of 100 in confidence order, the last left out, weights
    n_b / N over every sample (their code's loop, written out); none below 200 samples, where the L2 ECE is."""
    logits, labels = random_case(450, 10, 5)
    m = calibration_metrics(logits, labels, 10)
    p = probs64(logits)
    conf, hit = p.max(axis=1), p.argmax(axis=1) == labels
    order = np.argsort(conf)
    conf, hit = conf[order], hit[order]
    scored = [(lo, lo + 100) for lo in (0, 100, 200)]  # the last bin, 150 samples from 300, left out
    expected = np.sqrt(sum(100 / 450 * (conf[a:b].mean() - hit[a:b].mean()) ** 2 for a, b in scored))
    assert m["rms_calibration_error"] == pytest.approx(expected, rel=1e-9)
    assert m["rms_calibration_error"] != pytest.approx(m["l2_ece"], rel=1e-3)
    small = calibration_metrics(logits[:199], labels[:199], 10)
    assert "rms_calibration_error" not in small and "l2_ece" in small
    assert "100" in accumulators.CONVENTIONS["rms_calibration_error"]


def test_logit_statistics():
    logits = np.array([[3.0, 1.0, -1.0], [0.0, 2.0, 0.5]], dtype=np.float32)
    m = calibration_metrics(logits, np.array([0, 0]), 3)
    assert m["mean_margin"] == pytest.approx(((3 - 1) + (0 - 2)) / 2)
    assert m["mean_logit_norm"] == pytest.approx((np.sqrt(11) + np.sqrt(4.25)) / 2)
    assert m["mean_max_logit"] == pytest.approx(2.5)
    assert m["frac_margin_below_target"] == 0.5


def test_merged_accumulators_equal_one_pass():
    logits, labels = random_case(1000, 10, 11)
    whole = CalibrationAccumulator(10)
    whole.update(logits, labels)
    parts = [CalibrationAccumulator(10) for _ in range(4)]
    cuts = [0, 1, 250, 777, 1000]
    for part, lo, hi in zip(parts, cuts[:-1], cuts[1:], strict=True):
        part.update(logits[lo:hi], labels[lo:hi])
    merged = parts[0]
    for part in parts[1:]:
        merged.merge(part)
    a, b = whole.compute(), merged.compute()
    assert a.keys() == b.keys()
    for key in a:
        assert b[key] == pytest.approx(a[key], rel=1e-12, abs=1e-15), key
    assert_same_fields(merged, whole)


def assert_same_fields(acc, reference):
    """Every declared field of `acc` equals the reference's: counts and per-sample arrays exactly, sums to rounding."""
    for field in accumulators.SUMS:
        value, expected = getattr(acc, field.name), getattr(reference, field.name)
        assert type(value) is type(expected), field.name
        if field.dtype is np.int64:
            np.testing.assert_array_equal(value, expected, err_msg=field.name)
        else:
            np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-12, err_msg=field.name)
    for name, values in acc.samples().items():
        np.testing.assert_array_equal(values, reference.samples()[name], err_msg=name)


def test_every_value_an_accumulator_holds_is_one_declared_field():
    """FIELDS is the one list: the slots are its names (so a value that update() would keep without declaring it
    fails at the first update), every declared field is written by an update (a declaration update() does not
    fill fails here), and construction, merge and the distributed reduce read the declaration."""
    assert set(CalibrationAccumulator.__slots__) == {"num_classes", "n_bins", "margin_target"} | {
        f.name for f in accumulators.FIELDS
    }
    assert len({f.name for f in accumulators.FIELDS}) == len(accumulators.FIELDS)
    fresh = CalibrationAccumulator(10)
    with pytest.raises(AttributeError):
        fresh.undeclared_sum = 0.0
    logits, labels = random_case(200, 10, 5)
    logits[0] = 0.0  # a sample with margin 0, below the target
    fresh.update(logits, labels)
    for field in accumulators.FIELDS:
        value = getattr(fresh, field.name)
        assert np.any(value if field.reduction is accumulators.Reduction.SUM else len(value)), field.name


def test_distributed_reduce_gives_every_rank_the_whole_data_set(monkeypatch):
    """Two ranks' batches (rank r holds the batches b with b % 2 == r), reduced through the declaration with the
    collectives simulated: rank 0 ends with every field of the one-process accumulator."""
    from macs_audit import distributed

    logits, labels = random_case(400, 10, 7)
    starts = list(range(0, 400, 50))
    ranks = [CalibrationAccumulator(10), CalibrationAccumulator(10)]
    for b, start in enumerate(starts):
        ranks[b % 2].update(logits[start : start + 50], labels[start : start + 50])
    whole = CalibrationAccumulator(10)
    for start in starts:
        whole.update(logits[start : start + 50], labels[start : start + 50])
    other = ranks[1]
    other_sums = [np.asarray(getattr(other, f.name), dtype=f.dtype) for f in accumulators.SUMS]
    other_batches = list(zip(*(getattr(other, f.name) for f in accumulators.GATHERED), strict=True))
    monkeypatch.setattr(
        distributed, "all_reduce_sums", lambda values, ctx: [v + w for v, w in zip(values, other_sums, strict=True)]
    )

    def gather(parts, rank_starts, ctx):
        pairs = [*zip(rank_starts, parts, strict=True), *zip(starts[1::2], other_batches, strict=True)]
        return [part for _, part in sorted(pairs, key=lambda pair: pair[0])]

    monkeypatch.setattr(distributed, "gather_in_order", gather)
    reduced = ranks[0].reduce(starts[0::2], distributed.Context(rank=0, world_size=2))
    assert_same_fields(reduced, whole)
    assert reduced.compute() == pytest.approx(whole.compute(), rel=1e-12)


def test_accumulator_rejects_bad_inputs():
    from macs_audit.errors import InputError

    acc = CalibrationAccumulator(3)
    with pytest.raises(InputError, match="NaN"):
        acc.update(np.array([[np.nan, 0, 0]], dtype=np.float32), np.array([0]))
    with pytest.raises(InputError, match="out of range"):
        acc.update(np.zeros((1, 3), dtype=np.float32), np.array([3]))
    with pytest.raises(InputError, match="shape"):
        acc.update(np.zeros((1, 4), dtype=np.float32), np.array([0]))
    with pytest.raises(InputError, match="no samples"):
        acc.compute()


def test_temperature_scaling_recovers_planted_temperature():
    rng = np.random.default_rng(0)
    true_logits = rng.normal(size=(4000, 10)) * 2
    labels = np.array([rng.choice(10, p=p) for p in probs64(true_logits)])
    t = optimal_temperature(true_logits * 3.0, labels)  # the model is 3x overconfident
    assert t == pytest.approx(3.0, rel=0.1)


def test_stratified_split_is_seeded_and_stratified():
    labels = np.repeat(np.arange(5), 40)
    held, rest = stratified_split(labels, 0.25, seed=3)
    assert len(np.intersect1d(held, rest)) == 0 and len(held) + len(rest) == 200
    assert np.bincount(labels[held]).tolist() == [10] * 5
    assert (held == stratified_split(labels, 0.25, seed=3)[0]).all()
