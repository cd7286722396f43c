"""models/calibration_map.py: the Calibrator protocol, the record a model keeps of a calibrator, and its map as
the numbers both writers build on (a linear map, per-class tables), checked against the calibrator's transform."""

import numpy as np
import pytest

from macs_audit.calibrators.base import METHODS, fit_calibrator
from macs_audit.calibrators.common import log_softmax, softmax
from macs_audit.errors import InputError
from macs_audit.models import calibration_map as cm

K = 4


def fitted(method: str) -> cm.Calibrator:
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (300, K))
    labels = np.argmax(logits / 2 + rng.gumbel(size=logits.shape), axis=1)
    return fit_calibrator(method, logits, labels)


def test_every_method_is_written_by_one_of_the_two_kinds_of_map():
    assert sorted(cm.LINEAR_METHODS + cm.ONE_VS_REST_METHODS) == sorted(METHODS)


@pytest.mark.parametrize("method", cm.LINEAR_METHODS)
def test_the_linear_map_is_the_calibrators_transform(method):
    calibrator = fitted(method)
    z = np.random.default_rng(1).normal(0, 3, (20, K))
    weights, bias, on_log_probabilities = cm.linear_map(calibrator)
    assert on_log_probabilities == (method == "dirichlet")
    x = log_softmax(z) if on_log_probabilities else z
    mapped = x * weights + bias if weights.ndim == 1 else x @ weights.T + bias
    np.testing.assert_allclose(softmax(mapped), softmax(calibrator.transform(z)), atol=1e-12)
    if method == "temperature":
        np.testing.assert_allclose(weights, 1 / cm.fitted_temperature(calibrator))


@pytest.mark.parametrize("method", cm.ONE_VS_REST_METHODS)
def test_the_tables_reproduce_the_one_vs_rest_map(method):
    """Isotonic: numpy.interp on the padded points; histogram: the value of the bin the probability falls in,
    (lo, hi]; then the floor and renormalisation of the calibrator."""
    calibrator = fitted(method)
    z = np.random.default_rng(2).normal(0, 3, (30, K))
    p = softmax(z)
    x, v, interpolate = cm.one_vs_rest_tables(calibrator)
    assert interpolate == (method == "isotonic") and x.shape[0] == v.shape[0] == K
    if interpolate:
        assert (x[:, 0] == -1).all() and (x[:, -1] >= 1).all()  # every p in [0, 1] between two points
        f = np.stack([np.interp(p[:, k], x[k], v[k]) for k in range(K)], axis=1)
    else:
        f = np.stack([v[k][np.sum(x[k] < p[:, k, None], axis=1)] for k in range(K)], axis=1)
    q = np.maximum(f, cm.min_probability(calibrator))
    np.testing.assert_allclose(q / q.sum(1, keepdims=True), softmax(calibrator.transform(z)), atol=1e-12)


def test_a_map_of_the_other_kind_is_refused():
    with pytest.raises(InputError, match="not a linear map"):
        cm.linear_map(fitted("isotonic"))
    with pytest.raises(InputError, match="not a one-vs-rest map"):
        cm.one_vs_rest_tables(fitted("vector"))


def test_the_record_keeps_single_values_and_the_fit_data():
    calibrator = fitted("vector")
    record = cm.calibration_record(calibrator, {"source": "fit.npz", "n": 300})
    assert record["method"] == "vector" and record["n_classes"] == K and record["fit_size"] == 300
    assert record["fit_data"] == {"source": "fit.npz", "n": 300}
    assert all(np.ndim(value) == 0 for value in record["parameters"].values())
    assert "fit_data" not in cm.calibration_record(calibrator)


def test_check_method_refuses_unknown_methods_and_non_positive_temperatures():
    class Unknown:
        method, n_classes = "platt", K

    class Cold:
        method, n_classes, temperature = "temperature", K, 0.0

    with pytest.raises(InputError, match="cannot write a model calibrated with 'platt'"):
        cm.check_method(Unknown())  # type: ignore[arg-type]
    with pytest.raises(InputError, match="must be positive"):
        cm.check_method(Cold())  # type: ignore[arg-type]
    cm.check_method(fitted("temperature"))
