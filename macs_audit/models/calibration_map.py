"""A fitted post-hoc calibrator as the model writers read it: the `Calibrator` protocol (what every fitted
calibrator of `macs_audit.calibrators` offers), the record of it a model's metadata keeps, and its map as
numbers (a linear map of the logits or per-class tables), which the ONNX graph (`calibrated_onnx.py`) and the
torch fold and wrapper (`calibrated_torch.py`) both build on.

The protocol lives here, below the calibrators, so that this layer is typed against it and still never
imports them; `macs_audit.calibrators.base` names it for the rest of the package. Each method's fitted
numbers (temperature; scale or weights and bias; thresholds, edges and values; options) are the fields of
its own class, read here by method.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from macs_audit.errors import InputError

TEMPERATURE_METADATA_KEY = "macs_audit.temperature"  # informational; loaders ignore unknown keys
CALIBRATION_METADATA_KEY = "macs_audit.calibration"  # JSON: calibration_record()
LINEAR_METHODS = ("temperature", "vector", "matrix", "dirichlet")
ONE_VS_REST_METHODS = ("isotonic", "histogram")
FOLDABLE_METHODS = ("temperature", "vector", "matrix")  # maps of the logits that a linear head can absorb


class Calibrator(Protocol):
    """A fitted post-hoc calibrator (what every `fit_*` function of `macs_audit.calibrators` returns)."""

    @property
    def method(self) -> str: ...

    @property
    def n_classes(self) -> int: ...

    @property
    def fit_size(self) -> int: ...

    @property
    def n_parameters(self) -> int: ...

    def transform(self, logits: np.ndarray) -> np.ndarray:
        """Calibrated log-probabilities (N, K), float64: softmax(transform(z)) are the calibrated probabilities."""
        ...

    def describe(self) -> dict[str, Any]: ...


def _fields(calibrator: Calibrator) -> Any:
    """The calibrator's own fitted numbers, which are its method's (not the protocol's): read by method."""
    return calibrator


def fitted_temperature(calibrator: Calibrator) -> float:
    """The fitted temperature of temperature scaling."""
    return float(_fields(calibrator).temperature)


def min_probability(calibrator: Calibrator) -> float:
    """The floor a one-vs-rest calibrator puts under each class's probability before renormalising."""
    return float(_fields(calibrator).options["min_probability"])


def calibration_record(calibrator: Calibrator, fit_data: dict | None = None) -> dict[str, Any]:
    """What the model's metadata records: `describe()` (method, n_classes, fit_size, n_parameters, and the
    options and fit results that are single values; the fitted arrays are in the model itself) and `fit_data`."""
    record = calibrator.describe()
    record["parameters"] = {k: v for k, v in record["parameters"].items() if np.ndim(v) == 0}
    if fit_data is not None:
        record["fit_data"] = fit_data
    return record


def linear_map(calibrator: Calibrator) -> tuple[np.ndarray, np.ndarray, bool]:
    """(W, b, on log-probabilities) of a linear calibrator, whose calibrated logits are W z + b: W is (K, K), or a
    per-class scale (K,) meaning z * W + b; Dirichlet calibration applies it to log_softmax(z) instead of z."""
    method, fitted = calibrator.method, _fields(calibrator)
    if method == "temperature":
        k = calibrator.n_classes
        return np.full(k, 1.0 / fitted_temperature(calibrator)), np.zeros(k), False
    if method == "vector":
        return np.asarray(fitted.scale, np.float64), np.asarray(fitted.bias, np.float64), False
    if method in ("matrix", "dirichlet"):
        weights, bias = np.asarray(fitted.weights, np.float64), np.asarray(fitted.bias, np.float64)
        return weights, bias, method == "dirichlet"
    raise InputError(f"{method} calibration is not a linear map of the logits")


def one_vs_rest_tables(calibrator: Calibrator) -> tuple[np.ndarray, np.ndarray, bool]:
    """(x, v, interpolate): per-class tables (K, T), float64, for isotonic regression and histogram binning.

    Isotonic (interpolate=True): class k's map is numpy.interp(p, x[k], v[k]). The points are padded so that
    every p in [0, 1] lies between two of them: -1 in front with the first value and 2, 3, ... behind with
    the last, so the constant ends (numpy.interp's clip) are slope-0 segments and the rows share a length.
    Histogram (interpolate=False): x[k] holds the inner edges plus a 2 that no p passes, and the bin of p
    is the number of x[k] below p (bins are (lo, hi]); v[k] the bin values."""
    method, fitted = calibrator.method, _fields(calibrator)
    if method == "isotonic":
        width = max(len(t) for t in fitted.thresholds) + 2
        x, v = np.empty((calibrator.n_classes, width)), np.empty((calibrator.n_classes, width))
        for k, (xs, vs) in enumerate(zip(fitted.thresholds, fitted.values, strict=True)):
            pad = width - 1 - len(xs)
            x[k] = np.concatenate([[-1.0], xs, 2.0 + np.arange(pad)])
            v[k] = np.concatenate([[vs[0]], vs, np.full(pad, vs[-1])])
        return x, v, True
    if method == "histogram":
        edges = np.asarray(fitted.edges, np.float64)
        x = np.concatenate([edges[:, 1:-1], np.full((len(edges), 1), 2.0)], axis=1)
        return x, np.asarray(fitted.values, np.float64), False
    raise InputError(f"{method} calibration is not a one-vs-rest map")


def check_method(calibrator: Calibrator) -> None:
    """An InputError for a method no model writer knows, or a temperature that is not positive."""
    if calibrator.method not in LINEAR_METHODS + ONE_VS_REST_METHODS:
        raise InputError(f"cannot write a model calibrated with {calibrator.method!r}")
    if calibrator.method == "temperature" and not fitted_temperature(calibrator) > 0:
        raise InputError(f"the temperature must be positive, got {fitted_temperature(calibrator)}")
