"""The L2 ECEs and ECE-sweep against their references and on data whose calibration is known (smooth ECE:
test_smooth_ece.py)."""

import numpy as np
import pytest
from references import CASES, sample_with_calibration, sweep_by_brute_force

from macs_audit.metrics import estimators as E
from macs_audit.metrics import smooth_ece as S
from macs_audit.metrics.l2_ece import l2_ece


@pytest.mark.parametrize("n", [500, 10_000])
@pytest.mark.parametrize("case", CASES)
def test_l2_ece_agrees_with_uncertainty_calibration(n, case):
    cal = pytest.importorskip("calibration")
    f, y = sample_with_calibration(n, 1, CASES[case])
    # Their 15 equal-mass bins put edges midway between neighbouring sorted confidences: the same
    # groups as ours when confidences have no ties (continuous samples here).
    assert l2_ece(f, y) == pytest.approx(cal.get_calibration_error(f, y.astype(int), p=2, debias=True), abs=1e-12)
    plug_in = cal.get_calibration_error(f, y.astype(int), p=2, debias=False)
    assert l2_ece(f, y, debiased=False) == pytest.approx(plug_in, abs=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_ece_sweep_follows_its_definition(case):
    f, y = sample_with_calibration(2_000, 2, CASES[case])
    value, bins = E.ece_sweep(f, y)
    expected, expected_bins = sweep_by_brute_force(f, y, np.ones(len(f), dtype=np.int64))
    assert bins == expected_bins and bins >= 2
    assert value == pytest.approx(expected, abs=1e-12)


def test_ece_sweep_by_hand():
    # Eight predictions, the seventh wrong among confident ones. Equal-mass accuracies: 2 bins
    # (0, 0.75) rise; 3 bins (0, 0.67, 0.5) fall: the sweep keeps 2 bins, whose gaps are
    # |0 - mean(f[:4])| and |0.75 - mean(f[4:])|.
    f = np.linspace(0.1, 0.9, 8)
    y = np.array([0, 0, 0, 0, 1, 1, 0, 1], dtype=bool)
    value, bins = E.ece_sweep(f, y)
    assert bins == 2
    assert value == pytest.approx((abs(0 - f[:4].mean()) * 4 + abs(3 - f[4:].sum())) / 8)


def test_a_perfectly_calibrated_sampler_scores_near_zero():
    f, y = sample_with_calibration(50_000, 3, CASES["calibrated"])
    assert S.smooth_ece(f, y)[0] < 0.01
    assert l2_ece(f, y) < 0.01
    assert l2_ece(f, y, debiased=False) > l2_ece(f, y)  # the plug-in estimate is biased upwards
    f, y = sample_with_calibration(50_000, 3, CASES["overconfident"])
    assert S.smooth_ece(f, y)[0] > 0.1 and l2_ece(f, y) > 0.1


def test_estimators_do_not_depend_on_sample_order():
    f, y = sample_with_calibration(3_000, 4, CASES["wavy"])
    perm = np.random.default_rng(0).permutation(len(f))
    assert S.smooth_ece(f, y) == pytest.approx(S.smooth_ece(f[perm], y[perm]), abs=1e-12)
    assert l2_ece(f, y) == l2_ece(f[perm], y[perm])
    assert E.ece_sweep(f, y) == E.ece_sweep(f[perm], y[perm])


def test_empty_input_is_nan_not_an_error():
    empty = np.zeros(0)
    assert np.isnan(S.smooth_ece(empty, empty.astype(bool))[0])
    assert np.isnan(l2_ece(empty, empty.astype(bool)))
    assert np.isnan(E.ece_sweep(empty, empty.astype(bool))[0])
