"""The registry of post-hoc calibrators, the fit-size check, and the calibrator protocol they satisfy
(`Calibrator`, defined in `models/calibration_map.py`, where the model writers read it).

Every calibrator is fitted on held-out (logits, labels) by a function `fit_<method>(logits, labels,
**options)` and returns a frozen object with

- `transform(logits) -> log-probabilities` (N, K), float64 and finite: softmax of them gives the
  calibrated probabilities, so every metric that takes logits takes them unchanged;
- `n_parameters`: how many numbers the fit chose (for the one-vs-rest methods, the fitted points);
- `describe() -> dict`: method, n_classes, fit_size, n_parameters and `parameters` (options and fit
  results), JSON-ready, for the report and model metadata.

The core never prints. `fit_calibrator` checks the method and the calibration split's size
(`check_fit_size`) before fitting; the `fit_*` functions in `CALIBRATORS` fit whatever they are given.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from macs_audit.calibrators.common import as_logits
from macs_audit.calibrators.dirichlet import fit_dirichlet
from macs_audit.calibrators.histogram import N_BINS, fit_histogram
from macs_audit.calibrators.isotonic import fit_isotonic
from macs_audit.calibrators.matrix import fit_matrix
from macs_audit.calibrators.temperature import fit_temperature
from macs_audit.calibrators.vector import fit_vector
from macs_audit.errors import UsageError

# The protocol every fit_* function returns; it is defined where the model writers read it, below this layer.
from macs_audit.models.calibration_map import Calibrator

# name -> fit function(logits, labels, **options) -> Calibrator, in order of increasing flexibility.
CALIBRATORS: dict[str, Callable[..., Calibrator]] = {
    "temperature": fit_temperature,
    "vector": fit_vector,
    "matrix": fit_matrix,
    "dirichlet": fit_dirichlet,
    "isotonic": fit_isotonic,
    "histogram": fit_histogram,
}
METHODS = tuple(CALIBRATORS)
LABELS = {
    "temperature": "temperature scaling",
    "vector": "vector scaling",
    "matrix": "matrix scaling",
    "dirichlet": "Dirichlet calibration",
    "isotonic": "isotonic regression",
    "histogram": "histogram binning",
}
# Maps with parameters of their own per class (a class's bias, row, column or one-vs-rest map) learn each
# class from that class's fit images: with none they push the class down everywhere (a Dirichlet map fitted
# without classes 90-99 of CIFAR-100 took their accuracy from 56% to 4%). The fewest fit images of every
# class each needs; temperature scaling, one parameter shared by all classes, needs none.
MIN_IMAGES_PER_CLASS = {"vector": 5, "matrix": 5, "dirichlet": 5, "isotonic": 10, "histogram": 10}
ODIR_PARAMETERS_PER_SAMPLE = 4  # matrix and Dirichlet: ODIR lets them fit up to 4 parameters per image
ISOTONIC_SAMPLES_PER_CLASS = 10  # isotonic: each class's map comes from its own positives


def _requirement(method: str, n_classes: int, n_bins: int) -> tuple[int, str]:
    """(the smallest calibration split `method` is fitted on, why), for `n_classes` classes."""
    k = n_classes
    if method == "temperature":
        return 1, "fits 1 parameter"
    if method == "vector":
        return 2 * k, f"fits {2 * k:,} parameters (one image each)"
    if method in ("matrix", "dirichlet"):
        parameters = k * (k + 1)
        need = math.ceil(parameters / ODIR_PARAMETERS_PER_SAMPLE)
        return need, f"fits {parameters:,} parameters (at most {ODIR_PARAMETERS_PER_SAMPLE} per image with ODIR)"
    if method == "isotonic":
        per_class = ISOTONIC_SAMPLES_PER_CLASS
        return per_class * k, f"fits a step function per class ({per_class} images a class)"
    if method == "histogram":
        return n_bins * k, f"fits {n_bins * k:,} bin values ({n_bins} bins a class, one image each)"
    raise UsageError(f"unknown calibration method {method!r}; choose one of {', '.join(METHODS)}")


def minimum_fit_size(method: str, n_classes: int, n_bins: int = N_BINS) -> int:
    """The smallest calibration split `check_fit_size` accepts for `method` on `n_classes` classes."""
    return _requirement(method, n_classes, n_bins)[0]


def check_fit_size(method: str, n_samples: int, n_classes: int, n_bins: int = N_BINS) -> None:
    """Raise UsageError (one line) when `n_samples` held-out images are too few to fit `method` on `n_classes`.

    The rule, per method, for K classes: temperature 1 image; vector 2K (one per parameter); matrix and
    Dirichlet K(K + 1) / 4 (ODIR's regularisation lets them fit up to 4 parameters per image: 28 for 10
    classes, 2,525 for 100, 250,250 for 1,000); isotonic 10K; histogram n_bins x K (one per bin value)."""
    need, why = _requirement(method, n_classes, n_bins)
    if n_classes < 2:
        raise UsageError(f"calibration needs at least 2 classes, got {n_classes}")
    if n_samples < need:
        fits = [LABELS[m] for m in METHODS if m != method and minimum_fit_size(m, n_classes, n_bins) <= n_samples]
        advice = f" or {', '.join(fits)}" if fits else ""
        raise UsageError(
            f"{LABELS[method]} on {n_classes:,} classes {why}, so it needs a calibration split of at least "
            f"{need:,} images, got {n_samples:,}: use a larger calibration split{advice}"
        )


def classes_below(labels: np.ndarray, n_classes: int, minimum: int) -> list[int]:
    """The classes with fewer than `minimum` of `labels` (none at all included), in order."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=n_classes)
    return [int(c) for c in np.flatnonzero(counts < minimum)]


def shown_classes(classes: list[int], limit: int = 8) -> str:
    """'3, 7' or '90, 91, ..., 99 (10 classes)': the classes a message names."""
    if len(classes) <= limit:
        return ", ".join(map(str, classes))
    return f"{', '.join(map(str, classes[: limit - 1]))}, ..., {classes[-1]} ({len(classes):,} classes)"


def check_class_counts(method: str, labels: np.ndarray, n_classes: int) -> None:
    """Raise UsageError (one line) when `method` has parameters per class (MIN_IMAGES_PER_CLASS) and some class
    has fewer fit images than it needs."""
    minimum = MIN_IMAGES_PER_CLASS.get(method)
    if minimum is None:
        return
    short = classes_below(labels, n_classes, minimum)
    if short:
        raise UsageError(
            f"{LABELS[method]} fits parameters per class, so it needs at least {minimum} fit images of every "
            f"class; class {shown_classes(short)} {'has' if len(short) == 1 else 'have'} fewer: "
            "fit on data of every class, or use temperature scaling"
        )


def fit_calibrator(method: str, logits: np.ndarray, labels: np.ndarray, **options: Any) -> Calibrator:
    """Check the method, the split's size and its images per class, then fit `method` on held-out (logits,
    labels) with `options`."""
    z = as_logits(logits)
    check_fit_size(method, len(z), z.shape[1], options.get("n_bins", N_BINS))
    check_class_counts(method, labels, z.shape[1])
    return CALIBRATORS[method](z, labels, **options)
