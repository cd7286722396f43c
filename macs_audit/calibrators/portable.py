"""A portable calibration map: a fitted calibrator as JSON, applied in any Python process (docs/method.md, "A
portable calibration map").

`calibrate --predictions FILE` writes one (`calibration_map`); `read_calibration_map` checks one and rebuilds the
fitted calibrator of its method, the same class the fit returned, so its `transform` is the fitted one's code on
the same numbers (JSON keeps every float64 exactly); `apply_calibration(map, scores)` gives the calibrated
probabilities, and `calibrate MODEL --map FILE` folds it into a model.

The map's inputs are the scores it was fitted on, in that file's convention: logits, or probabilities (read as
their logarithm, as a prediction file's and a model's probabilities are); a binary classifier's single column (its
positive class's logit z or probability p) is read as the two columns (0, z) or (1 - p, p): macs_audit/scores.py's
rule. numpy and scipy only: no torch, no model.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.calibrators.base import LABELS, METHODS
from macs_audit.calibrators.common import softmax
from macs_audit.calibrators.dirichlet import DirichletCalibration
from macs_audit.calibrators.histogram import STRATEGIES, HistogramBinning
from macs_audit.calibrators.isotonic import IsotonicCalibration
from macs_audit.calibrators.matrix import MatrixScaling
from macs_audit.calibrators.temperature import TemperatureScaling
from macs_audit.calibrators.vector import VectorScaling
from macs_audit.errors import InputError
from macs_audit.models.calibration_map import Calibrator
from macs_audit.scores import LOGITS, PROBABILITIES, as_logits
from macs_audit.text import shortened
from macs_audit.version import __version__

FORMAT = "macs-audit calibration map"
VERSION = 1  # a change a reader of this version would misread raises it
MOST_BYTES = 512 * 2**20  # a map of 1,000 classes' matrix scaling is about 25 MiB
# The maps whose output changes when one number is added to a row of their inputs (per-class scales and weights):
# the others read only the softmax of their inputs, the same for logits, log-probabilities and a binary (0, z).
SHIFTED_BY_ROW = ("vector", "matrix")
KEYS = ("format", "version", "method", "n_classes", "class_names", "inputs", "binary", "fit_size", "parameters")


def calibration_map(
    calibrator: Calibrator,
    *,
    class_names: list[str] | None,
    input_kind: str,
    binary: bool,
    selection: dict[str, Any],
    fit: dict[str, Any] | None = None,
    warnings: list[str] | tuple[str, ...] = (),
) -> dict[str, Any]:
    """The JSON-ready map of a fitted `calibrator`: the format and its version, the method and every fitted number
    (`parameters`, arrays as lists), the class order (`class_names`, None: by index), what its inputs are
    (`input_kind` LOGITS or PROBABILITIES, `binary`: a single column), the fit size, `fit` (what the fit data was:
    its source, sizes, scores), the `selection` it was chosen by (calibrators.selection.Selection.to_dict(), with
    the never-worse decision) and the `warnings` of its fit."""
    record: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "method": calibrator.method,
        "label": LABELS[calibrator.method],
        "n_classes": int(calibrator.n_classes),
        "class_names": None if class_names is None else [str(name) for name in class_names],
        "inputs": input_kind,
        "binary": bool(binary),
        "fit_size": int(calibrator.fit_size),
        "n_parameters": int(calibrator.n_parameters),
        "parameters": _plain(_parameters(calibrator)),
        "fit": _plain(fit or {}),
        "selection": _plain(selection),
        "warnings": list(warnings),
        "macs_audit_version": __version__,
    }
    read_calibration_map(record)  # what is written reads back, or the writer is wrong
    return record


def _parameters(calibrator: Calibrator) -> dict[str, Any]:
    """The numbers that rebuild `calibrator` (its method's own fields; `_rebuild` reads them back)."""
    fitted: Any = calibrator  # each method's fields, read by method
    method = calibrator.method
    if method == "temperature":
        return {"temperature": fitted.temperature}
    found: dict[str, Any] = {"options": fitted.options}
    if method == "vector":
        found.update(scale=fitted.scale, bias=fitted.bias, optimizer=fitted.optimizer)
    elif method in ("matrix", "dirichlet"):
        found.update(weights=fitted.weights, bias=fitted.bias, optimizer=fitted.optimizer)
    elif method == "isotonic":
        found.update(thresholds=fitted.thresholds, values=fitted.values)
    elif method == "histogram":
        found.update(edges=fitted.edges, values=fitted.values)
    else:
        raise InputError(f"cannot write a calibration map of the method {method!r}")
    return found


def _plain(value: Any) -> Any:
    """`value` with numpy arrays and scalars as Python lists and numbers, for json."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


@dataclasses.dataclass(frozen=True)
class CalibrationMap:
    """A map read back: the fitted calibrator of its method, and what its inputs are."""

    calibrator: Calibrator
    class_names: list[str] | None  # in output order; None: by index
    inputs: str  # LOGITS or PROBABILITIES
    binary: bool  # fitted on a binary classifier's single column
    record: dict[str, Any]  # the map as read (its fit, selection and warnings too)

    @property
    def n_classes(self) -> int:
        return self.calibrator.n_classes

    def log_probabilities(self, scores: Any) -> np.ndarray:
        """Calibrated log-probabilities (N, K), float64 and finite, of `scores` in the map's convention (see
        `apply_calibration`): the logits an audit of the calibrated predictions reads."""
        return self.calibrator.transform(self._as_logits(scores))

    def _as_logits(self, scores: Any) -> np.ndarray:
        """`scores` as the (N, K) float64 logits the calibrator was fitted on (macs_audit/scores.py's rule)."""
        z = np.asarray(scores)
        what = f"{self.inputs} of the positive class" if self.binary else self.inputs
        if self.binary and not (z.ndim == 1 or (z.ndim == 2 and z.shape[1] == 1)):
            raise InputError(
                f"this calibration map was fitted on a binary classifier's one column ({what}); give shape (N,) or "
                f"(N, 1), got {z.shape}"
            )
        if not self.binary and (z.ndim != 2 or z.shape[1] != self.n_classes):
            raise InputError(
                f"this calibration map was fitted on {self.n_classes} classes ({shortened(self.names())}); give "
                f"{self.inputs} of shape (N, {self.n_classes}), got {z.shape}"
            )
        return as_logits("the scores to calibrate", self.inputs, z)[0].astype(np.float64, copy=False)

    def names(self) -> list[str]:
        """The class names, "0", "1", ... where the map names none."""
        return self.class_names or [str(k) for k in range(self.n_classes)]

    def check_model(self, model: str, n_outputs: int, class_names: list[str] | None, output_kind: str | None) -> None:
        """InputError (one line) where this map does not fold into `model`, whose `n_outputs` scores are
        `output_kind` ("logits" or "probabilities", which the predictor reads as their logarithm) with
        `class_names` (None: unnamed): another class count, other names where both name the classes, or scores
        it does not read as the map's fit did.

        The predictor's log-probabilities of a model's probabilities are the map's probabilities' inputs; a
        model's logits are its log-probabilities plus one number per row, and so are the two columns of a binary
        model and the (0, z) of a single column: the same inputs for every map but vector and matrix scaling,
        whose per-class scales and weights turn that number into a change of the probabilities."""
        if n_outputs != self.n_classes:
            raise InputError(
                f"the calibration map was fitted on {self.n_classes} classes but {model} has {n_outputs} outputs; "
                "fold a map fitted on this model's predictions"
            )
        if self.class_names is not None and class_names is not None and len(class_names) == n_outputs:
            if list(class_names) != self.class_names:
                order = " in another order" if sorted(class_names) == sorted(self.class_names) else ""
                raise InputError(
                    f"the calibration map's classes ({shortened(self.class_names)}) are not {model}'s "
                    f"({shortened(class_names)}){order}; fold a map fitted on this model's predictions"
                )
        kind = output_kind or LOGITS
        fitted_on = f"{self.inputs} of a binary classifier's one column" if self.binary else self.inputs
        if self.calibrator.method in SHIFTED_BY_ROW and (self.binary or kind != self.inputs):
            raise InputError(
                f"a {LABELS[self.calibrator.method]} map fitted on {fitted_on} does not fold into {model}, whose "
                f"outputs are {n_outputs} {kind}; fit it on this model's {kind}, or use a map that reads only the "
                "softmax (temperature, dirichlet, isotonic, histogram)"
            )


def apply_calibration(
    calibration_map: CalibrationMap | Mapping[str, Any] | str | os.PathLike, scores: Any
) -> np.ndarray:
    """The calibrated probabilities (N, K), float64, of `scores` under a calibration map (a path to its JSON, the
    JSON read as a dict, or a CalibrationMap). `scores` are what the map was fitted on: logits (N, K), or
    probabilities (N, K) where it was fitted on probabilities; for a binary classifier's single-column map, its
    positive class's logit or probability, (N,) or (N, 1). Their column count must be the map's classes.

    The log of the result are log-probabilities, logits as `macs_audit.audit_predictions` reads them (where a
    probability underflows to 0, its log is -inf: `read_calibration_map(m).log_probabilities(scores)` gives the
    same log-probabilities, always finite)."""
    fitted = calibration_map if isinstance(calibration_map, CalibrationMap) else read_calibration_map(calibration_map)
    return softmax(fitted.log_probabilities(scores))


def read_calibration_map(source: Mapping[str, Any] | str | os.PathLike) -> CalibrationMap:
    """The map at path `source` (or `source` itself, a map read as a dict), checked, with its fitted calibrator
    rebuilt. InputError (one line) for a file that is not a calibration map, another version of the format, a
    missing key, or numbers that are not what its method needs (shapes, finite values)."""
    if isinstance(source, Mapping):
        name, record = "calibration map", source
    else:
        from macs_audit.files import read_small_json

        name = f"calibration map {source}"
        record = read_small_json(Path(source), MOST_BYTES, what="calibration map", holds="a calibration map")
    if not isinstance(record, Mapping) or record.get("format") != FORMAT:
        raise InputError(f'{name}: not a calibration map (a JSON object with "format": {FORMAT!r})')
    version = record.get("version")
    if version != VERSION:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > VERSION
        raise InputError(
            f"{name}: format version {version!r} is not {VERSION}, the version this macs-audit reads"
            + (" (written by a newer macs-audit: upgrade it)" if newer else "")
        )
    missing = [key for key in KEYS if key not in record]
    if missing:
        raise InputError(f"{name}: missing {', '.join(repr(key) for key in missing)}; write it again with calibrate")
    method = record["method"]
    if method not in METHODS:
        raise InputError(f"{name}: unknown method {method!r}; one of {', '.join(METHODS)}")
    k = _count(name, record, "n_classes", 2)
    fit_size = _count(name, record, "fit_size", 1)
    class_names = record["class_names"]
    if class_names is not None and (
        not isinstance(class_names, list)
        or not all(isinstance(c, str) for c in class_names)
        or len(class_names) != k
        or len(set(class_names)) != k
    ):
        raise InputError(f"{name}: 'class_names' must be null or {k} different strings, one per class")
    if record["inputs"] not in (LOGITS, PROBABILITIES):
        raise InputError(f"{name}: 'inputs' is {record['inputs']!r}; one of {LOGITS!r}, {PROBABILITIES!r}")
    if not isinstance(record["binary"], bool) or (record["binary"] and k != 2):
        raise InputError(f"{name}: 'binary' must be true (a single column, 2 classes) or false")
    parameters = record["parameters"]
    for key in ("parameters", "fit", "selection"):  # the record of the fit and selection is optional
        if (key == "parameters" or record.get(key) is not None) and not isinstance(record.get(key), Mapping):
            raise InputError(f"{name}: {key!r} must be a JSON object")
    warnings = record.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise InputError(f"{name}: 'warnings' must be a list of strings")
    calibrator = _rebuild(name, method, _Numbers(name, method, parameters), k, fit_size)
    return CalibrationMap(calibrator, class_names, record["inputs"], record["binary"], dict(record))


def _count(name: str, record: Mapping[str, Any], key: str, least: int) -> int:
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InputError(f"{name}: {key!r} must be a whole number of at least {least}, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class _Numbers:
    """A map's `parameters`, each read as the type its method needs, with a one-line InputError naming it."""

    name: str
    method: str
    parameters: Mapping[str, Any]

    def error(self, key: str, what: str) -> InputError:
        return InputError(f"{self.name}: the {self.method} map's {key!r} must be {what}")

    def get(self, key: str) -> Any:
        if key not in self.parameters:
            raise InputError(f"{self.name}: the {self.method} map has no parameter {key!r}")
        return self.parameters[key]

    def array(self, key: str, shape: tuple[int | None, ...]) -> np.ndarray:
        """A finite float64 array of `shape` (None: any length)."""
        wanted = "(" + ", ".join("any" if n is None else str(n) for n in shape) + ")"
        try:
            value = np.asarray(self.get(key))
        except ValueError:  # ragged lists
            raise self.error(key, f"an array of shape {wanted}") from None
        if value.dtype.kind not in "fiu" or value.ndim != len(shape):
            raise self.error(key, f"an array of numbers of shape {wanted}")
        if any(n is not None and n != m for n, m in zip(shape, value.shape, strict=True)):
            raise self.error(key, f"of shape {wanted}, not {value.shape}")
        if not np.isfinite(value).all():
            raise self.error(key, "finite numbers")
        return value.astype(np.float64)

    def rows(self, key: str, k: int) -> list[np.ndarray]:
        """`k` arrays of numbers of any length (isotonic regression's points)."""
        value = self.get(key)
        if not isinstance(value, list) or len(value) != k:
            raise self.error(key, f"a list of {k} arrays, one per class")
        return [self.array_of(key, row) for row in value]

    def array_of(self, key: str, row: Any) -> np.ndarray:
        return _Numbers(self.name, self.method, {key: row}).array(key, (None,))

    def number(self, key: str) -> float:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise self.error(key, "a finite number")
        return float(value)

    def options(self, k: int) -> dict[str, Any]:
        """The fit's options, checked where `transform` reads them (the one-vs-rest floor)."""
        options = self.get("options")
        if not isinstance(options, Mapping):
            raise self.error("options", "a JSON object")
        if self.method in ("isotonic", "histogram"):
            floor = _Numbers(self.name, self.method, options).number("min_probability")
            if not 0 <= floor < 1 / k:
                raise self.error("min_probability", f"in [0, 1/{k})")
        return dict(options)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.get(key)
        if not isinstance(value, Mapping):
            raise self.error(key, "a JSON object")
        return dict(value)


def _rebuild(name: str, method: str, numbers: _Numbers, k: int, fit_size: int) -> Calibrator:
    """The fitted calibrator of `method` from its map's numbers, K = `k` classes."""
    if method == "temperature":
        temperature = numbers.number("temperature")
        if not temperature > 0:
            raise numbers.error("temperature", "positive")
        return TemperatureScaling(temperature=temperature, n_classes=k, fit_size=fit_size)
    options = numbers.options(k)
    if method in ("vector", "matrix", "dirichlet"):
        bias, optimizer = numbers.array("bias", (k,)), numbers.mapping("optimizer")
        if method == "vector":
            scale = numbers.array("scale", (k,))
            return VectorScaling(scale=scale, bias=bias, fit_size=fit_size, options=options, optimizer=optimizer)
        weights = numbers.array("weights", (k, k))
        cls = MatrixScaling if method == "matrix" else DirichletCalibration
        return cls(weights=weights, bias=bias, fit_size=fit_size, options=options, optimizer=optimizer)
    if method == "isotonic":
        thresholds, values = numbers.rows("thresholds", k), numbers.rows("values", k)
        for x, v in zip(thresholds, values, strict=True):
            if len(x) == 0 or len(x) != len(v) or np.any(np.diff(x) < 0):
                raise numbers.error("thresholds", "non-decreasing, each as long as its class's values")
            if v.min() < 0 or v.max() > 1:
                raise numbers.error("values", "in [0, 1]")
        return IsotonicCalibration(thresholds=thresholds, values=values, fit_size=fit_size, options=options)
    bin_values = numbers.array("values", (k, None))
    bins = bin_values.shape[1]
    edges = numbers.array("edges", (k, bins + 1))
    if np.any(np.diff(edges, axis=1) < 0):
        raise numbers.error("edges", "non-decreasing in each class")
    if options.get("n_bins") != bins or options.get("strategy") not in STRATEGIES:
        raise InputError(f"{name}: the histogram map's options must hold n_bins = {bins} and a strategy")
    return HistogramBinning(edges=edges, values=bin_values, fit_size=fit_size, options=options)
