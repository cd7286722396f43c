"""Each calibrator against a reference fitted on the same data: netcal, scikit-learn, or a direct scipy fit.

netcal (`pip install netcal`; its tests skip without it) takes probabilities, not logits. Its conventions:
- TemperatureScaling fits a weight 1/T on log(clip(p)) (= the logits up to a per-row constant) with
  scipy's L-BFGS-B on finite-difference gradients; `temperature` returns that weight.
- LogisticCalibration (multi-class) is vector scaling on log-probabilities, fitted the same way: our
  vector scaling on log_softmax(z) is the same model.
- IsotonicRegression and HistogramBinning are one-vs-rest and renormalise, without a floor (0 stays 0).
- HistogramBinning predicts only with equal-width bins; with equal-mass bins it fits (np.quantile edges,
  outer edges 0 and 1, like ours) but cannot transform. Its fit uses [lo, hi) bins and its prediction
  (lo, hi]; ours is (lo, hi] throughout, so the two agree unless a probability lies exactly on an edge.
"""

import numpy as np
import pytest
from calibrator_data import draw_labels, synthetic_logits
from scipy.optimize import minimize
from scipy.special import log_softmax as scipy_log_softmax

from macs_audit.calibrators.common import log_softmax, mean_nll, softmax
from macs_audit.calibrators.dirichlet import fit_dirichlet
from macs_audit.calibrators.histogram import fit_histogram
from macs_audit.calibrators.isotonic import fit_isotonic
from macs_audit.calibrators.matrix import fit_matrix
from macs_audit.calibrators.temperature import fit_temperature
from macs_audit.calibrators.vector import fit_vector

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pyro's, under netcal's scaling methods


@pytest.fixture(scope="module")
def fit_half(sample_split):
    """The fit half (1,000 predictions of the sample model, float64, netcal's input precision)."""
    return sample_split[0], sample_split[1]


@pytest.fixture(scope="module")
def held_out(sample_split):
    return sample_split[2]


# --- temperature and vector scaling against netcal -----------------------------------------------------------


def test_temperature_matches_netcal(fit_half):
    TemperatureScaling = pytest.importorskip("netcal.scaling").TemperatureScaling

    z, y = fit_half
    ours = fit_temperature(z, y)
    reference = TemperatureScaling()
    reference.fit(softmax(z), y)
    t_netcal = 1.0 / float(np.asarray(reference.temperature).ravel()[0])
    # Both minimise the same NLL in T; bounded Brent (xatol 1e-6 on log T) vs finite-difference L-BFGS-B.
    assert ours.temperature == pytest.approx(t_netcal, rel=1e-4)
    assert mean_nll(ours.transform(z), y) <= mean_nll(log_softmax(z / t_netcal), y) + 1e-10
    np.testing.assert_allclose(np.exp(ours.transform(z)), reference.transform(softmax(z)), atol=1e-4)


def test_vector_scaling_on_log_probabilities_matches_netcal_logistic_calibration(fit_half):
    LogisticCalibration = pytest.importorskip("netcal.scaling").LogisticCalibration

    z, y = fit_half
    features = log_softmax(z)
    ours = fit_vector(features, y)
    reference = LogisticCalibration()
    reference.fit(softmax(z), y)
    scale, bias = np.asarray(reference.weights, float), np.asarray(reference.intercept, float)
    # netcal's finite-difference gradients stop within ~5e-4 of the optimum; ours (analytic) is at least as low.
    np.testing.assert_allclose(ours.scale, scale, atol=2e-3)
    np.testing.assert_allclose(ours.bias, bias - bias.mean(), atol=2e-3)  # softmax ignores a shift of b
    assert mean_nll(ours.transform(features), y) <= mean_nll(log_softmax(features * scale + bias), y) + 1e-10
    np.testing.assert_allclose(np.exp(ours.transform(features)), reference.transform(softmax(z)), atol=1e-3)


# --- vector, matrix and Dirichlet against a direct scipy fit ----------------------------------------------------


def _direct_fit(objective, x0):
    """A plain scipy fit: BFGS on finite-difference gradients of an independently written objective."""
    result = minimize(objective, x0, method="BFGS", options={"gtol": 1e-9, "maxiter": 10_000})
    return result.x, result.fun


def _linear_objective(features, labels, k, lambda_od, mu):
    rows = np.arange(len(labels))

    def objective(theta):
        w, b = theta[: k * k].reshape(k, k), theta[k * k :]
        nll = -scipy_log_softmax(features @ w.T + b, axis=1)[rows, labels].mean()
        return nll + lambda_od * np.mean(w[~np.eye(k, dtype=bool)] ** 2) + mu * np.mean(b**2)

    return objective


@pytest.fixture(scope="module")
def small():
    """600 samples, 4 classes, miscalibrated: labels from a map the calibrators have to learn."""
    z = synthetic_logits(600, 4, seed=11)
    true = np.array([[0.7, 0.2, 0.0, -0.1], [0.0, 1.1, 0.2, 0.0], [-0.1, 0.0, 0.5, 0.1], [0.1, 0.0, 0.0, 0.9]])
    return z, draw_labels(softmax(z @ true.T + [0.3, -0.2, 0.0, 0.1]), np.random.default_rng(12))


def test_vector_scaling_matches_a_direct_fit(small):
    z, y = small
    k, rows = z.shape[1], np.arange(len(y))
    x, fun = _direct_fit(
        lambda t: -scipy_log_softmax(z * t[:k] + t[k:], axis=1)[rows, y].mean(), np.r_[np.ones(k), np.zeros(k)]
    )
    ours = fit_vector(z, y)
    assert ours.describe()["parameters"]["objective"] <= fun + 1e-10
    assert ours.describe()["parameters"]["objective"] == pytest.approx(fun, abs=1e-9)
    np.testing.assert_allclose(ours.scale, x[:k], atol=1e-4)
    np.testing.assert_allclose(ours.bias, x[k:] - x[k:].mean(), atol=1e-4)


@pytest.mark.parametrize("method", ["matrix", "dirichlet"])
def test_matrix_and_dirichlet_match_a_direct_fit(method, small):
    z, y = small
    k = z.shape[1]
    lambda_od, mu = 0.5, 0.5  # > 0: the regularised optimum is unique, so the parameters themselves compare
    features = z if method == "matrix" else log_softmax(z)
    x, fun = _direct_fit(_linear_objective(features, y, k, lambda_od, mu), np.r_[np.eye(k).ravel(), np.zeros(k)])
    fit = fit_matrix if method == "matrix" else fit_dirichlet
    ours = fit(z, y, lambda_od=lambda_od, mu=mu)
    assert ours.describe()["parameters"]["objective"] <= fun + 1e-10
    assert ours.describe()["parameters"]["objective"] == pytest.approx(fun, abs=1e-9)
    np.testing.assert_allclose(ours.weights, x[: k * k].reshape(k, k), atol=1e-4)
    np.testing.assert_allclose(ours.bias, x[k * k :], atol=1e-4)


# --- isotonic regression against scikit-learn and netcal ------------------------------------------------------


def test_isotonic_matches_scikit_learn_per_class(fit_half, held_out):
    from sklearn.isotonic import IsotonicRegression

    z, y = fit_half
    ours = fit_isotonic(z, y)
    p, q = softmax(z), softmax(held_out)
    mapped = ours.one_vs_rest(held_out)
    for k in range(z.shape[1]):
        reference = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
        reference.fit(p[:, k], (y == k).astype(float))
        np.testing.assert_array_equal(ours.thresholds[k], reference.X_thresholds_)
        np.testing.assert_array_equal(ours.values[k], reference.y_thresholds_)
        # the exported step functions, evaluated with numpy.interp, predict what scikit-learn predicts
        np.testing.assert_allclose(mapped[:, k], reference.predict(q[:, k]), rtol=0, atol=1e-12)


def test_isotonic_fit_is_scikit_learns_on_ties_and_hairline_gaps():
    """The fit reproduces scikit-learn's steps without importing it: exactly its thresholds and values, also where
    x values repeat or lie less than float64's resolution apart (scikit-learn merges those into one point)."""
    from sklearn.isotonic import IsotonicRegression

    from macs_audit.calibrators.isotonic import _isotonic_fit

    rng = np.random.default_rng(3)
    for trial in range(60):
        n = int(rng.integers(2, 800))
        x = rng.random(n)
        if trial % 3 == 0:
            x = np.round(x, int(rng.integers(1, 4)))  # ties
        if trial % 2 == 0:
            x[: n // 2] = x[n // 2 : n // 2 * 2] + rng.choice([0.0, 1e-16, 5e-16, 2e-15], size=n // 2)
        hit = (rng.random(n) < x).astype(float)
        reference = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(x, hit)
        thresholds, values = _isotonic_fit(x, hit)
        np.testing.assert_array_equal(thresholds, reference.X_thresholds_)
        np.testing.assert_array_equal(values, reference.y_thresholds_)


def test_isotonic_matches_netcal(fit_half, held_out):
    IsotonicRegression = pytest.importorskip("netcal.binning").IsotonicRegression

    z, y = fit_half
    reference = IsotonicRegression()
    reference.fit(softmax(z), y)
    expected = reference.transform(softmax(held_out))
    rows = np.isfinite(expected).all(axis=1)  # netcal divides 0 by 0 where every class maps to 0
    assert rows.mean() > 0.95
    ours = fit_isotonic(z, y, min_probability=0.0)
    np.testing.assert_allclose(ours.probabilities(held_out)[rows], expected[rows], rtol=0, atol=1e-12)
    # the default floor (0.01 / K) adds at most 0.01 to a row's estimates before renormalising: the calibrated
    # probabilities move little (L1 about twice that), and the rows netcal leaves at 0 / 0 get a distribution
    floored = fit_isotonic(z, y).probabilities(held_out)
    assert np.abs(floored[rows] - expected[rows]).sum(axis=1).max() < 0.03
    np.testing.assert_allclose(floored.sum(axis=1), 1.0, atol=1e-12)


# --- histogram binning against netcal -------------------------------------------------------------------------


def test_equal_width_histogram_matches_netcal(fit_half, held_out):
    HistogramBinning = pytest.importorskip("netcal.binning").HistogramBinning

    z, y = fit_half
    reference = HistogramBinning(bins=10)
    reference.fit(softmax(z), y)
    ours = fit_histogram(z, y, n_bins=10, strategy="uniform", min_probability=0.0)
    for label, model in reference._multiclass_instances:
        np.testing.assert_allclose(ours.values[label], model._bin_map, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ours.edges[label], model._bin_bounds[0], rtol=0, atol=0)
    expected = reference.transform(softmax(held_out))
    rows = np.isfinite(expected).all(axis=1)
    assert rows.all()
    np.testing.assert_allclose(ours.probabilities(held_out), expected, rtol=0, atol=1e-12)


def test_equal_mass_histogram_fits_like_netcal(fit_half):
    HistogramBinning = pytest.importorskip("netcal.binning").HistogramBinning

    z, y = fit_half  # 1,000 samples: the 1/10 .. 9/10 quantiles fall between two probabilities, never on one
    reference = HistogramBinning(bins=10, equal_intervals=False)
    reference.fit(softmax(z), y)
    ours = fit_histogram(z, y, n_bins=10, strategy="quantile")
    for label, model in reference._multiclass_instances:
        np.testing.assert_allclose(ours.edges[label], model._bin_bounds[0], rtol=0, atol=1e-15)
        np.testing.assert_allclose(ours.values[label], model._bin_map, rtol=0, atol=1e-12)
    # equal mass: every class's bins hold 100 fit samples
    p = softmax(z)
    for k in range(z.shape[1]):
        counts = np.bincount(np.searchsorted(ours.edges[k, 1:-1], p[:, k], side="left"), minlength=10)
        assert counts.tolist() == [100] * 10
