"""Fit several post-hoc calibrators on one split, score each on another, and pick one by a chosen metric.

What `calibrate --method all` writes and the audit's `calibrators` section shows: one row per method
with its held-out accuracy, NLL, ECE, smooth ECE and Brier (accuracy too, because the maps that are not
monotone in the logits, vector/matrix/Dirichlet/isotonic/histogram, can change predictions), beside the
uncalibrated model's row. A method the fit split is too small for, or that has parameters per class and
lacks fit images of some class, is not fitted; its row says why.

The choice prefers the simpler map (earlier in METHODS): the best-scoring map is chosen over a simpler
fitted one only when it wins beyond the noise of the selection split, that is when the 95% paired interval
of its score minus the simpler map's (per-image differences for NLL, Brier and accuracy; a paired
bootstrap for the ECEs) excludes zero in its favour. The uncalibrated model (no map) is the last candidate,
so that a fix never makes the selection split worse: the chosen map is applied only when it scores better
there than the uncalibrated model; when it does not, `selected` is UNCALIBRATED (the callers write or fold
nothing) and `best_map` is the map chosen. `Selection.reason` says why the chosen candidate won.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from macs_audit.calibrators.base import (
    LABELS,
    METHODS,
    Calibrator,
    check_class_counts,
    check_fit_size,
    fit_calibrator,
)
from macs_audit.calibrators.common import as_fit_data
from macs_audit.data.splits import stratified_split
from macs_audit.errors import UsageError
from macs_audit.metrics.accumulators import N_BINS, bin_index, calibration_metrics, ece_from_bins
from macs_audit.metrics.registry import METRICS
from macs_audit.metrics.smooth_ece import smooth_ece

UNCALIBRATED = "uncalibrated"
SCORES = ("accuracy", "nll", "ece", "smooth_ece", "brier")  # the table's columns; each can be `select`
DEFAULT_SELECT = "nll"
PER_IMAGE = ("nll", "brier", "accuracy")  # scores that are means over images: paired intervals from the differences
BOOTSTRAP_RESAMPLES = 200  # the ECEs' paired bootstrap
DEFAULT_HOLDOUT = 0.3  # of the fit data, the part the maps are scored (not fitted) on
# Below this many held-out images an accuracy's 95% half-width exceeds 10 points (9.8 at 50% on 100): a map's
# win or loss against the uncalibrated model there is noise, and a refusal says so rather than blame the map.
MIN_SELECTION_IMAGES = 100
Z95 = 1.959963984540054


@dataclasses.dataclass
class Trial:
    """One method's row: held-out scores, or why it was not fitted."""

    method: str
    scores: dict[str, float] | None = None
    n_parameters: int | None = None
    fit_seconds: float | None = None
    refused: str | None = None  # the fit-size check's message
    calibrator: Calibrator | None = dataclasses.field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {"method": self.method, "label": LABELS.get(self.method, self.method)}
        if self.refused:
            row["refused"] = self.refused
        else:
            row.update(scores=self.scores, n_parameters=self.n_parameters)
        return row


@dataclasses.dataclass
class Selection:
    trials: list[Trial]  # the uncalibrated row first, then the methods in the order asked
    select: str
    selected: str  # by `select`, the simpler candidate unless a more flexible one wins beyond the noise (see module)
    n_fit: int
    n_eval: int
    reason: str = ""  # why `selected` was chosen, in one sentence
    best_map: str = ""  # the choice among the fitted maps (`selected`, unless it does not beat UNCALIBRATED)

    @property
    def calibrates(self) -> bool:
        """Whether a map beat the uncalibrated model (see the module); False: write or fold nothing."""
        return self.selected != UNCALIBRATED

    @property
    def too_few(self) -> str | None:
        """'too few images to select a map: ...' where the selection split is below MIN_SELECTION_IMAGES, else None."""
        if self.n_eval >= MIN_SELECTION_IMAGES:
            return None
        return (
            f"too few images to select a map: {self.n_eval:,} held-out images, need at least "
            f"{MIN_SELECTION_IMAGES} to tell a map from the uncalibrated model beyond their noise"
        )

    @property
    def best(self) -> Trial:
        return next(t for t in self.trials if t.method == self.selected)

    def to_dict(self) -> dict[str, Any]:
        return {
            "select": self.select,
            "selected": self.selected,
            "n_fit": self.n_fit,
            "n_eval": self.n_eval,
            "reason": self.reason,
            "methods": [t.to_dict() for t in self.trials],
        }


def parse_methods(text: str) -> list[str]:
    """'all' or a comma-separated list of METHODS, in METHODS order; UsageError names the choices."""
    names = list(METHODS) if text.strip() == "all" else [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise UsageError(
            f"unknown calibration method {', '.join(unknown) or repr(text)}; choose all or any of {', '.join(METHODS)}"
        )
    return [m for m in METHODS if m in names]


def check_select(select: str) -> str:
    if select not in SCORES:
        raise UsageError(f"--select {select!r} is not a score of the table; choose one of {', '.join(SCORES)}")
    return select


def scores_of(log_probabilities: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    metrics = calibration_metrics(log_probabilities, labels, log_probabilities.shape[1])
    return {name: float(metrics[name]) for name in SCORES}


def per_image_scores(log_probabilities: np.ndarray, labels: np.ndarray, select: str) -> np.ndarray:
    """Each image's share of a PER_IMAGE score: its NLL, Brier or correctness."""
    rows = np.arange(len(labels))
    if select == "nll":
        return -log_probabilities[rows, labels]
    p = np.exp(log_probabilities)
    if select == "accuracy":
        return (p.argmax(axis=1) == labels).astype(np.float64)
    onehot = np.zeros_like(p)
    onehot[rows, labels] = 1.0
    return ((p - onehot) ** 2).sum(axis=1)


def _calibration_error(confidence: np.ndarray, correct: np.ndarray, select: str) -> float:
    """The ECE (15 equal-width bins, the audit's) or the smooth ECE of (confidence, correct) pairs."""
    if select == "smooth_ece":
        return smooth_ece(confidence, correct)[0]
    bins = bin_index(confidence)
    count = np.bincount(bins, minlength=N_BINS)
    conf_sum = np.bincount(bins, weights=confidence, minlength=N_BINS)
    correct_sum = np.bincount(bins, weights=correct, minlength=N_BINS)
    return ece_from_bins(count, conf_sum, correct_sum, len(confidence))


def paired_interval(a: np.ndarray, b: np.ndarray, labels: np.ndarray, select: str, seed: int = 0) -> list[float]:
    """The 95% interval of score(b) - score(a) on the same images, from log-probabilities a and b: from the
    per-image differences for PER_IMAGE scores, else a paired bootstrap of the (smooth) ECE's difference,
    both maps' ECEs computed on the same resampled images."""
    if select in PER_IMAGE:
        d = per_image_scores(b, labels, select) - per_image_scores(a, labels, select)
        half = Z95 * float(d.std(ddof=1)) / np.sqrt(len(d)) if len(d) > 1 else 0.0
        return [float(d.mean()) - half, float(d.mean()) + half]
    pairs = []
    for log_p in (a, b):
        p = np.exp(log_p)
        pairs.append((p.max(axis=1), (p.argmax(axis=1) == labels).astype(np.float64)))
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        idx = rng.integers(0, len(labels), len(labels))
        (ca, ka), (cb, kb) = pairs
        draws.append(_calibration_error(cb[idx], kb[idx], select) - _calibration_error(ca[idx], ka[idx], select))
    low, high = np.quantile(draws, [0.025, 0.975])
    return [float(low), float(high)]


def _choose(trials: list[Trial], z_eval: np.ndarray, y_eval: np.ndarray, select: str) -> tuple[str, str]:
    """(the chosen method, why): the best by `select` of the fitted `trials`, unless a simpler fitted map is
    within the noise of it."""
    higher = METRICS[select].higher_is_better
    score = {t.method: float(t.scores[select]) for t in trials if t.scores is not None}
    maps = {t.method: t.calibrator for t in trials if t.calibrator is not None}
    best = min(maps, key=lambda m: -score[m] if higher else score[m])  # min: the first (simplest) of ties
    label, value, n = LABELS[best], score[best], f"{len(y_eval):,}-image selection split"
    simpler = [m for m in maps if METHODS.index(m) < METHODS.index(best)]
    if not simpler:
        return best, f"{label} has the best held-out {select} and is the simplest map fitted"
    outputs = maps[best].transform(z_eval)
    for method in simpler:  # the simplest first
        low, high = paired_interval(maps[method].transform(z_eval), outputs, y_eval, select)
        if not (low > 0 if higher else high < 0):
            return method, (
                f"{LABELS[method]} kept: {label} scored {select} {value:.4g} against its {score[method]:.4g}, a "
                f"difference within the noise of the {n} (95% paired interval [{low:.4g}, {high:.4g}]), so the "
                "simpler map"
            )
    return best, (
        f"{label} has the best held-out {select} ({value:.4g}) and beats every simpler map beyond the noise of "
        f"the {n} (95% paired intervals of the difference exclude 0)"
    )


def _choose_against_uncalibrated(
    trials: list[Trial], z_eval: np.ndarray, y_eval: np.ndarray, select: str
) -> tuple[str, str, str]:
    """(the chosen candidate, why, the choice among the fitted maps): that choice (`_choose`) when it scores
    better by `select` than the uncalibrated model (trials[0]), else UNCALIBRATED."""
    scores = {t.method: t.scores[select] for t in trials if t.scores is not None}  # the uncalibrated row's too
    best_map, reason = _choose([t for t in trials if t.calibrator is not None], z_eval, y_eval, select)
    score, none = scores[best_map], scores[UNCALIBRATED]
    if score > none if METRICS[select].higher_is_better else score < none:
        return best_map, reason, best_map
    return (  # the scores are in the table; the reason names the map a forced write would use
        UNCALIBRATED,
        f"{LABELS[best_map]}, the map chosen, scored no better held-out {select} than the uncalibrated model on "
        f"the {len(y_eval):,}-image selection split, so no map",
        best_map,
    )


def compare_calibrators(
    fit_logits: np.ndarray,
    fit_labels: np.ndarray,
    eval_logits: np.ndarray,
    eval_labels: np.ndarray,
    methods: list[str] | tuple[str, ...] = METHODS,
    select: str = DEFAULT_SELECT,
) -> Selection:
    """Fit each of `methods` on (fit_logits, fit_labels), score it on (eval_logits, eval_labels) and select
    the best by `select`. UsageError when none of them can be fitted on a split of this size."""
    check_select(select)
    z_fit, y_fit = as_fit_data(fit_logits, fit_labels)
    z_eval, y_eval = as_fit_data(eval_logits, eval_labels)
    trials = [Trial(UNCALIBRATED, scores=scores_of(z_eval, y_eval), n_parameters=0)]
    for method in methods:
        try:
            check_fit_size(method, len(y_fit), z_fit.shape[1])
            check_class_counts(method, y_fit, z_fit.shape[1])
        except UsageError as exc:
            trials.append(Trial(method, refused=str(exc)))
            continue
        start = time.perf_counter()
        calibrator = fit_calibrator(method, z_fit, y_fit)
        seconds = time.perf_counter() - start
        scores = scores_of(calibrator.transform(z_eval), y_eval)
        trials.append(Trial(method, scores, calibrator.n_parameters, seconds, calibrator=calibrator))
    fitted = [t for t in trials if t.calibrator is not None]
    if not fitted:
        raise UsageError(f"no calibration method can be fitted on {len(y_fit):,} images: {trials[-1].refused}")
    chosen, reason, best_map = _choose_against_uncalibrated(trials, z_eval, y_eval, select)
    return Selection(trials, select, chosen, len(y_fit), len(y_eval), reason, best_map)


def check_holdout(holdout: float) -> float:
    """`holdout`, the fraction of the fit data the choice is scored on, checked (before any model loads)."""
    if not 0 < holdout < 1:
        raise UsageError(f"--holdout must be in (0, 1), got {holdout}")
    return holdout


def choose_on_holdout(
    logits: np.ndarray,
    labels: np.ndarray,
    methods: list[str] | tuple[str, ...],
    select: str = DEFAULT_SELECT,
    holdout: float = DEFAULT_HOLDOUT,
    seed: int = 0,
) -> tuple[Selection, Calibrator | None]:
    """Each of `methods` fitted on a class-stratified 1 - `holdout` of (logits, labels) and scored on the rest
    against the uncalibrated model (compare_calibrators); the chosen map is then fitted again on all of them.
    None in its place when no map beats the uncalibrated model (the selection says so: nothing to write or
    fold). What `calibrate` (one method or several) and `finetune`'s temperatures decide by."""
    check_holdout(holdout)
    if len(methods) == 1:  # too few images for it even on all of them: the error names all of them
        check_fit_size(methods[0], len(labels), logits.shape[1])
        check_class_counts(methods[0], labels, logits.shape[1])
    held, fit = stratified_split(labels, holdout, seed)
    if len(held) == 0 or len(fit) == 0:
        raise UsageError(f"--holdout {holdout} leaves no images to fit or to score on ({len(labels)} in the fit data)")
    selection = compare_calibrators(logits[fit], labels[fit], logits[held], labels[held], methods, select)
    if not selection.calibrates:
        return selection, None
    return selection, fit_calibrator(selection.selected, logits, labels)
