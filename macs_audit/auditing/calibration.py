"""The calibration split of the evaluation data and what is fitted on it: the temperature, the post-hoc
calibrators and the conformal sets, each fitted on the split's `fit` part and scored on its `scored` part.
The split is drawn once per audit (`calibration_split`) and passed to each."""

from __future__ import annotations

import dataclasses

import numpy as np

from macs_audit.calibrators.selection import compare_calibrators
from macs_audit.calibrators.temperature import optimal_temperature
from macs_audit.data.splits import stratified_split
from macs_audit.errors import UsageError
from macs_audit.metrics import accumulators, conformal
from macs_audit.metrics.registry import TEMPERATURE_METRICS
from macs_audit.models.config import MAX_CLASSES
from macs_audit.progress import ProgressFn, Stage, step
from macs_audit.report import Calibrators, Reliability, TemperatureFit

TEMPERATURE_STAGE = Stage("temperature scaling", "")
CALIBRATORS_STAGE = Stage("post-hoc calibrators", "methods")
CONFORMAL_STAGE = Stage("conformal sets", "")
SPLIT = "class-stratified, seeded"


@dataclasses.dataclass(frozen=True)
class Split:
    """Positions of the evaluation data: `fit` (round(fraction x class size) of every class) and `scored`."""

    fit: np.ndarray
    scored: np.ndarray
    fraction: float
    seed: int


def check_calibration_split(fraction: float) -> float:
    """`fraction` when it is in [0, 1) (0: no split); else the UsageError that names the option."""
    if not 0 <= fraction < 1:
        raise UsageError(f"--calibration-split must be in [0, 1), got {fraction}")
    return fraction


def calibration_split(labels: np.ndarray, fraction: float, seed: int) -> Split | None:
    """The stratified, seeded split of `labels`; None when `fraction` is 0 or either part would be empty."""
    if check_calibration_split(fraction) == 0:
        return None
    fit, scored = stratified_split(labels, fraction, seed)
    if len(fit) == 0 or len(scored) == 0:
        return None
    return Split(fit=fit, scored=scored, fraction=fraction, seed=seed)


# Below these sizes an estimate is reported with a note in conventions.small_sample (not skipped: the gate's
# keys keep their values): a temperature fitted on a handful of images follows its few confident errors
# (T = 148 on 3 images), and the debiased L2 ECE's variance correction needs 2 images in each equal-mass bin.
TEMPERATURE_MIN_FIT = 50
DEBIASED_MIN_PER_BIN = 2


def small_sample_notes(n_images: int, temperature: TemperatureFit | None, n_bins: int) -> list[str]:
    """What is estimated from fewer images than it needs, one sentence each (empty when nothing is)."""
    notes = []
    if temperature is not None and temperature.n_fit is not None and temperature.n_fit < TEMPERATURE_MIN_FIT:
        notes.append(
            f"temperature T = {temperature.temperature:.3f} fitted on {temperature.n_fit:,} held-out images, fewer "
            f"than {TEMPERATURE_MIN_FIT}: T and the scaled metrics are unreliable (more data, or a larger "
            "--calibration-split)"
        )
    need = DEBIASED_MIN_PER_BIN * n_bins
    if n_images < need:
        notes.append(
            f"debiased L2 ECE on {n_images:,} images: its {n_bins} equal-mass bins need {DEBIASED_MIN_PER_BIN} "
            f"images each ({need}) for the variance correction; read it, and its interval, as unknown"
        )
    return notes


def temperature_section(
    logits: np.ndarray,
    labels: np.ndarray,
    num_classes: int,
    split: Split | None,
    *,
    progress: ProgressFn | None = None,
) -> TemperatureFit | None:
    """T fitted on the split's fit part; the metrics before and after it on the scored part."""
    if split is None:
        return None
    fit, scored = split.fit, split.scored
    finish = step(progress, TEMPERATURE_STAGE)
    t = optimal_temperature(logits[fit], labels[fit])
    before, after = accumulators.CalibrationAccumulator(num_classes), accumulators.CalibrationAccumulator(num_classes)
    before.update(logits[scored], labels[scored])
    after.update(logits[scored] / t, labels[scored])
    raw, scaled = before.compute(), after.compute()
    bins = [Reliability.from_dict(before.reliability()), Reliability.from_dict(after.reliability())]
    finish()
    return TemperatureFit.of(
        temperature=t,
        fit_fraction=split.fraction,
        n_fit=int(len(fit)),
        n_eval=int(len(scored)),
        split=SPLIT,
        seed=split.seed,
        raw={k: raw[k] for k in TEMPERATURE_METRICS},
        scaled={k: scaled[k] for k in TEMPERATURE_METRICS},
        raw_reliability=bins[0],
        scaled_reliability=bins[1],
    )


def helpful_temperature(fit: TemperatureFit | None) -> float | None:
    """The fitted T where it lowered the NLL on the scored part, else None: the label-free estimates use the
    scaled scores only then, by the rule every fix follows (a map is used only where it beats leaving the model
    uncalibrated, calibrators/selection.py); a T fitted on a few images can be far off (0.02 on 20)."""
    if fit is None or not fit.scaled["nll"] < fit.raw["nll"]:
        return None
    return fit.temperature


def calibrators_section(
    logits: np.ndarray,
    labels: np.ndarray,
    methods: tuple[str, ...],
    split: Split | None,
    *,
    progress: ProgressFn | None = None,
) -> Calibrators | None:
    """Each of `methods` fitted on the temperature's fit part and scored on the rest (the same split), for
    information; a method the part is too small for is listed as refused. None when none can be fitted."""
    if not methods or split is None:
        return None
    fit, scored = split.fit, split.scored
    finish = step(progress, CALIBRATORS_STAGE, len(methods))
    try:
        selection = compare_calibrators(logits[fit], labels[fit], logits[scored], labels[scored], methods)
    except UsageError:  # too few images in the fit part for every method: the table would say nothing
        return None
    finally:
        finish()
    return Calibrators.of(**selection.to_dict(), split=f"the temperature's: {SPLIT}", seed=split.seed)


def parse_raps(text: str | None) -> tuple[int, float] | None:
    """'K,LAMBDA' -> (k_reg, penalty) for --raps: k_reg an integer 0..MAX_CLASSES (a rank), the penalty a number
    0..conformal.MAX_RAPS_PENALTY."""
    if text is None:
        return None
    parts = text.replace(" ", "").split(",")
    try:
        k_reg, penalty = int(parts[0]), float(parts[1])
        valid = len(parts) == 2 and 0 <= k_reg <= MAX_CLASSES and 0 <= penalty <= conformal.MAX_RAPS_PENALTY
    except (ValueError, IndexError):
        valid = False
    if not valid:
        raise UsageError(
            f"--raps must be K_REG,PENALTY (an integer 0 to {MAX_CLASSES:,} and a number 0 to "
            f"{conformal.MAX_RAPS_PENALTY:g}), got {text!r}"
        )
    return k_reg, penalty


def check_conformal_split(fraction: float | None) -> float | None:
    """`fraction` when it is None (share the temperature's part) or in (0, 1); else the UsageError naming it."""
    if fraction is not None and not 0 < fraction < 1:
        raise UsageError(f"--conformal-split must be a fraction in (0, 1), got {fraction:g}")
    return fraction


def conformal_fit(
    logits: np.ndarray,
    labels: np.ndarray,
    split: Split | None,
    *,
    coverage: float,
    progress: ProgressFn | None = None,
    conformal_split: float | None = None,
    raps: tuple[int, float] | None = None,
) -> conformal.SplitConformal | None:
    """Conformal sets fitted on the temperature's fit part (the same split) and scored on the rest; with
    `conformal_split` F, fitted on their own class-stratified F of the temperature's scored part instead (drawn
    with the split's seed) and scored on what remains. None without a calibration split."""
    if split is None:
        return None
    check_conformal_split(conformal_split)
    fit, scored, described = split.fit, split.scored, f"the temperature's: {SPLIT}"
    if conformal_split is not None:
        own, rest = stratified_split(labels[split.scored], conformal_split, split.seed)
        if len(own) == 0 or len(rest) == 0:
            raise UsageError(
                f"--conformal-split {conformal_split:g} leaves no images to fit or to score the conformal sets on "
                f"({len(split.scored)} scored by the temperature's split)"
            )
        fit, scored = split.scored[own], split.scored[rest]
        described = f"its own: {conformal_split:g} of the temperature's scored part, {SPLIT}"
    finish = step(progress, CONFORMAL_STAGE)
    sets = conformal.SplitConformal.fit(
        logits, labels, fit=fit, scored=scored, coverage=coverage, seed=split.seed, split=described, raps=raps
    )  # the randomised scores' draws from the split's seed
    finish()
    return sets
