"""Known answers: labels drawn from a known miscalibration of seeded logits; the fitted map recovers it.

20,000 samples and 5 classes: the tolerances sit above the largest errors of the maximum-likelihood estimates
over seeds 0-4 (scales and matrix entries up to 0.05, vector and matrix intercepts up to 0.07, Dirichlet
intercepts up to 0.23: their direction is close to that of W's row sums on log-probabilities, whose row mean
varies little; the largest probability error of any map on fresh logits up to 0.13, the mean one 0.005).
"""

import numpy as np
import pytest
from calibrator_data import draw_labels, synthetic_logits

from macs_audit.calibrators.common import log_softmax, mean_nll, softmax
from macs_audit.calibrators.dirichlet import fit_dirichlet
from macs_audit.calibrators.histogram import fit_histogram
from macs_audit.calibrators.isotonic import fit_isotonic
from macs_audit.calibrators.matrix import fit_matrix
from macs_audit.calibrators.temperature import fit_temperature
from macs_audit.calibrators.vector import fit_vector

N, K = 20_000, 5
SCALE = np.array([0.5, 0.8, 1.2, 0.6, 1.5])
BIAS = np.array([0.4, -0.3, 0.1, 0.0, -0.2])  # mean 0
WEIGHTS = np.diag([0.6, 0.9, 1.3, 0.7, 1.1]) + np.array(
    [
        [0.0, 0.2, 0.0, -0.1, 0.0],
        [0.0, 0.0, 0.3, 0.0, 0.0],
        [-0.2, 0.0, 0.0, 0.0, 0.1],
        [0.0, 0.1, 0.0, 0.0, 0.0],
        [0.15, 0.0, 0.0, -0.25, 0.0],
    ]
)


@pytest.fixture(scope="module")
def logits():
    return synthetic_logits(N, K, seed=0)


@pytest.fixture(scope="module")
def fresh():
    """Other logits, to compare the fitted and the true maps on."""
    return synthetic_logits(5000, K, seed=99)


def _labels(probabilities, seed=100):
    return draw_labels(probabilities, np.random.default_rng(seed))


def _centred(weights):
    """W up to what softmax ignores: adding one vector to every row."""
    return weights - weights.mean(axis=0, keepdims=True)


def test_temperature_recovers_the_temperature(logits):
    y = _labels(softmax(logits / 2.0))
    assert fit_temperature(logits, y).temperature == pytest.approx(2.0, rel=0.03)


def test_calibrated_logits_give_the_identity(logits):
    y = _labels(softmax(logits))
    assert fit_temperature(logits, y).temperature == pytest.approx(1.0, rel=0.03)
    vector = fit_vector(logits, y)
    np.testing.assert_allclose(vector.scale, 1.0, atol=0.08)
    np.testing.assert_allclose(vector.bias, 0.0, atol=0.08)


def test_vector_scaling_recovers_scales_and_intercepts(logits, fresh):
    y = _labels(softmax(logits * SCALE + BIAS))
    fitted = fit_vector(logits, y)
    np.testing.assert_allclose(fitted.scale, SCALE, atol=0.08)
    np.testing.assert_allclose(fitted.bias, BIAS, atol=0.1)
    np.testing.assert_allclose(np.exp(fitted.transform(fresh)), softmax(fresh * SCALE + BIAS), atol=0.1)
    # the maximum-likelihood fit explains its own data at least as well as the truth
    assert fitted.describe()["parameters"]["objective"] <= mean_nll(log_softmax(logits * SCALE + BIAS), y)


@pytest.mark.parametrize("method", ["matrix", "dirichlet"])
def test_matrix_and_dirichlet_recover_the_map(method, logits, fresh):
    features, fresh_features = (logits, fresh) if method == "matrix" else (log_softmax(logits), log_softmax(fresh))
    y = _labels(softmax(features @ WEIGHTS.T + BIAS))
    fit = fit_matrix if method == "matrix" else fit_dirichlet
    fitted = fit(logits, y, lambda_od=0.0, mu=0.0)  # unregularised: the maximum-likelihood map
    np.testing.assert_allclose(_centred(fitted.weights), _centred(WEIGHTS), atol=0.08)
    np.testing.assert_allclose(fitted.bias - fitted.bias.mean(), BIAS, atol=0.1 if method == "matrix" else 0.3)
    truth = softmax(fresh_features @ WEIGHTS.T + BIAS)
    np.testing.assert_allclose(np.exp(fitted.transform(fresh)), truth, atol=0.2)
    assert np.abs(np.exp(fitted.transform(fresh)) - truth).mean() < 0.01
    assert fitted.describe()["parameters"]["objective"] <= mean_nll(log_softmax(features @ WEIGHTS.T + BIAS), y)


def test_odir_pulls_the_map_toward_a_diagonal(logits):
    y = _labels(softmax(logits @ WEIGHTS.T + BIAS))
    free, strong = fit_matrix(logits, y, lambda_od=0.0, mu=0.0), fit_matrix(logits, y, lambda_od=1e4, mu=1e4)
    off = ~np.eye(K, dtype=bool)
    assert np.abs(strong.weights[off]).max() < 0.01 < np.abs(_centred(free.weights)[off]).max()
    assert np.abs(strong.bias).max() < 0.01


@pytest.mark.parametrize("fit", [fit_isotonic, fit_histogram])
def test_one_vs_rest_maps_of_calibrated_probabilities_are_near_the_identity(fit, logits, fresh):
    y = _labels(softmax(logits))
    p = softmax(fresh)
    mapped = fit(logits, y).one_vs_rest(fresh)
    # histogram binning replaces p by its bin's mean: the equal-mass bins' widths bound the error
    assert np.abs(mapped - p).mean() < 0.03
