"""The calibrator protocol, the registry and the fit-size check (macs_audit/calibrators/base.py)."""

import json

import numpy as np
import pytest
from calibrator_data import draw_labels, synthetic_logits

from macs_audit.calibrators.base import (
    CALIBRATORS,
    METHODS,
    check_fit_size,
    fit_calibrator,
    minimum_fit_size,
)
from macs_audit.calibrators.common import softmax
from macs_audit.calibrators.temperature import TemperatureScaling, fit_temperature, optimal_temperature
from macs_audit.errors import InputError, UsageError

K = 6


@pytest.fixture(scope="module")
def data():
    z = synthetic_logits(1200, K, seed=3) * 1.5  # overconfident: labels come from softmax(z / 1.5)
    return z, draw_labels(softmax(z / 1.5), np.random.default_rng(4))


def test_registry_lists_the_six_methods_in_order():
    assert METHODS == ("temperature", "vector", "matrix", "dirichlet", "isotonic", "histogram")


@pytest.mark.parametrize("method", METHODS)
def test_every_calibrator_follows_the_protocol(method, data):
    z, y = data
    calibrator = fit_calibrator(method, z, y)
    assert calibrator.method == method and calibrator.n_classes == K and calibrator.fit_size == len(y)
    log_p = calibrator.transform(z[:50])
    assert log_p.shape == (50, K) and log_p.dtype == np.float64 and np.isfinite(log_p).all()
    # log-probabilities: they normalise, so softmax maps them back to the calibrated probabilities
    np.testing.assert_allclose(np.exp(log_p).sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(softmax(log_p), np.exp(log_p), atol=1e-12)
    description = json.loads(json.dumps(calibrator.describe()))  # JSON-ready
    assert description["method"] == method
    assert description["fit_size"] == len(y) and description["n_classes"] == K
    assert description["n_parameters"] == calibrator.n_parameters > 0
    assert isinstance(description["parameters"], dict)


@pytest.mark.parametrize("method", METHODS)
def test_fits_are_deterministic(method, data):
    z, y = data
    first, second = CALIBRATORS[method](z, y), CALIBRATORS[method](z, y)
    assert np.array_equal(first.transform(z), second.transform(z))
    assert first.describe() == second.describe()


def test_parameter_counts(data):
    z, y = data
    counts = {m: CALIBRATORS[m](z, y).n_parameters for m in ("temperature", "vector", "matrix", "dirichlet")}
    assert counts == {"temperature": 1, "vector": 2 * K, "matrix": K * (K + 1), "dirichlet": K * (K + 1)}
    histogram = CALIBRATORS["histogram"](z, y, n_bins=10)
    assert histogram.n_parameters == K * 10 + K * 9  # values, and the inner edges of the equal-mass bins
    assert CALIBRATORS["histogram"](z, y, n_bins=10, strategy="uniform").n_parameters == K * 10
    isotonic = CALIBRATORS["isotonic"](z, y)
    assert isotonic.n_parameters == 2 * sum(len(t) for t in isotonic.thresholds)


def test_temperature_entry_is_fit_temperature_with_the_optimal_temperature(data):
    z, y = data
    assert CALIBRATORS["temperature"] is fit_temperature
    calibrator = fit_temperature(z, y)
    assert isinstance(calibrator, TemperatureScaling) and calibrator.temperature == optimal_temperature(z, y)
    assert calibrator.describe()["parameters"] == {"temperature": calibrator.temperature}


def test_fit_size_check_refuses_matrix_scaling_on_1000_classes_with_500_images():
    with pytest.raises(UsageError) as caught:
        check_fit_size("matrix", 500, 1000)
    message = str(caught.value)
    assert "\n" not in message
    assert "1,001,000 parameters" in message and "250,250" in message and "got 500" in message
    assert "temperature scaling" in message  # what would fit instead


@pytest.mark.parametrize(
    ("method", "n_classes", "smallest"),
    [
        ("temperature", 1000, 1),
        ("vector", 10, 20),
        ("vector", 1000, 2000),
        ("matrix", 10, 28),
        ("dirichlet", 100, 2525),
        ("isotonic", 10, 100),
        ("histogram", 10, 150),
    ],
)
def test_fit_size_check_thresholds(method, n_classes, smallest):
    assert minimum_fit_size(method, n_classes) == smallest
    check_fit_size(method, smallest, n_classes)
    if smallest > 1:
        with pytest.raises(UsageError):
            check_fit_size(method, smallest - 1, n_classes)


def test_fit_size_check_follows_the_bin_count():
    check_fit_size("histogram", 50, 10, n_bins=5)
    with pytest.raises(UsageError, match="60 bin values"):
        check_fit_size("histogram", 50, 10, n_bins=6)


def test_unknown_method_and_too_few_classes():
    with pytest.raises(UsageError, match="unknown calibration method 'platt'"):
        check_fit_size("platt", 1000, 10)
    with pytest.raises(UsageError, match="at least 2 classes"):
        check_fit_size("temperature", 1000, 1)


def test_fit_calibrator_checks_the_size_before_fitting(data):
    z, y = data
    with pytest.raises(UsageError, match="matrix scaling on 6 classes"):
        fit_calibrator("matrix", z[:5], y[:5])


@pytest.mark.parametrize("method", METHODS)
def test_bad_inputs_raise_input_errors(method, data):
    z, y = data
    fit = CALIBRATORS[method]
    bad = z.copy()
    bad[0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        fit(bad, y)
    with pytest.raises(InputError, match="labels must lie in"):
        fit(z, np.where(y == 0, K, y))
    with pytest.raises(InputError, match="do not match"):
        fit(z, y[:-1])
    with pytest.raises(InputError, match="fitted on 6 classes"):
        fit(z, y).transform(z[:, :-1])


@pytest.mark.parametrize("method", ["isotonic", "histogram"])
def test_one_vs_rest_floor(method, data):
    z, y = data
    assert CALIBRATORS[method](z, y).describe()["parameters"]["min_probability"] == pytest.approx(0.01 / K)
    with pytest.raises(UsageError, match="min_probability"):
        CALIBRATORS[method](z, y, min_probability=0.5)
