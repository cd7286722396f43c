"""The features half of the audit: what the model's penultimate features (the input of its final layer,
models/features.py) show that its logits hide.

`FeatureTaps` is the inference loop's feature sink (inference.FeatureSink), held by the run's context: every pass
hands it its features, read in the same call as the logits. It keeps the clean view's, the OOD and unlabeled
sets' and the fit data's in full (the detectors' inputs), and tests every other pass (a perturbation or corruption
view, a shift set; the unlabeled and OOD sets too) against the clean features with the kernel two-sample test
(metrics/two_sample.py), keeping only the result: the `representation_shift` section.

`feature_ood` fits the feature-space detectors (metrics/feature_ood.py) on in-distribution features (--feature-fit-
data, else the clean calibration split's fit part), scores the clean data they were not fitted on and the OOD set,
and adds their scores to the OOD section beside the logit scores, with what was fitted (`ood.features`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from macs_audit import distributed
from macs_audit.auditing.calibration import Split
from macs_audit.auditing.options import AuditInputs, AuditOptions, RunContext
from macs_audit.data.sources import Source
from macs_audit.distributed import Context
from macs_audit.errors import InputError
from macs_audit.metrics import feature_ood, two_sample
from macs_audit.metrics import ood as ood_metrics
from macs_audit.report import FeatureDetectors, OODDetection, RepresentationShift, ShiftTest
from macs_audit.text import shortened
from macs_audit.views.view import View

CLEAN_PASS, FIT_PASS = "clean", "feature fit data"  # stage names of passes (inference.evaluate_view)
KEPT = {CLEAN_PASS: "clean", "ood data": "ood", "unlabeled data": "unlabeled", FIT_PASS: "fit"}  # kept whole
# The audit's two-sample tests, one per view (a corruption grid has 75 or 95): subsampled and permuted less than
# metrics/two_sample.py's defaults, so that each costs a fraction of a second on 2 cores.
SHIFT_MAX_SAMPLES = 500
SHIFT_PERMUTATIONS = 200
DATA_SETS = ("unlabeled", "shift")  # the views the gate's `max_representation_mmd` reads: data the model meets
FIT_SPLIT = "the calibration split's fit part of --data"
FEATURE_DETECTORS = tuple(name for name in feature_ood.DETECTORS if name != "gen")  # GEN reads the logits alone


def read_features(predictor: Any, options: AuditOptions) -> tuple[Any, str | None]:
    """(the model's FeatureHead, None) with its features enabled, or (None, why not) where `options.features` is
    "auto" and the model gives none; an InputError where it is "on"."""
    if options.features == "off":
        return None, None
    from macs_audit.models.features import enable_features

    try:
        return enable_features(predictor, options.feature_layer), None
    except InputError as error:
        if options.features == "on" or options.feature_layer is not None:
            raise
        return None, str(error)


class FeatureTaps:
    """The features of every pass (inference.FeatureSink): the clean, OOD, unlabeled and fit passes' kept whole,
    every other pass tested against the clean features (its stage name, its view's kind)."""

    def __init__(self, seed: int, strict: bool = False):
        self.seed, self.strict = seed, strict  # strict (--features on): a test that cannot run is an error
        self.notes: list[str] = []  # what could not be tested, and why (--features auto)
        self.kept: dict[str, np.ndarray] = {}
        self.tests: list[ShiftTest] = []
        self._batches: list[np.ndarray] = []
        self._starts: list[int] = []

    def observe(self, start: int, features: np.ndarray) -> None:
        self._starts.append(start)
        self._batches.append(np.asarray(features, dtype=np.float32))

    def finish(self, name: str, view: View, ctx: Context) -> None:
        batches, starts = self._batches, self._starts
        self._batches, self._starts = [], []
        gathered = distributed.gather_in_order(batches, starts, ctx) if ctx.active else batches
        features = np.concatenate(gathered) if gathered else np.zeros((0, 0), np.float32)
        purpose = KEPT.get(name)
        if purpose is not None:
            self.kept[purpose] = features
        if purpose not in ("clean", "fit"):
            self.test(purpose or (view.name if view.kind != "clean" else name), purpose or view.kind, features)

    def test(self, name: str, kind: str, features: np.ndarray) -> None:
        """The two-sample test of a pass's features against the clean features (none before the clean pass)."""
        if CLEAN_PASS not in self.kept or min(len(features), len(self.kept[CLEAN_PASS])) < 2:
            return  # nothing to test against, or a set of one image: no two-sample test
        try:
            result = two_sample.mmd_test(
                features,
                self.kept[CLEAN_PASS],
                seed=self.seed,
                permutations=SHIFT_PERMUTATIONS,
                max_samples=SHIFT_MAX_SAMPLES,
            )
        except InputError as error:
            if self.strict:
                raise
            self.notes.append(f"{name}: {error}")
            return
        self.tests.append(
            ShiftTest.of(
                name=name,
                kind=kind,
                n=int(result["n_a"]),
                n_reference=int(result["n_b"]),
                mmd2=float(result["mmd2"]),
                mmd=float(result["mmd"]),
                p_value=float(result["p_value"]),
                bandwidth=float(result["bandwidth"]),
            )
        )

    def section(self, head: Any) -> RepresentationShift | None:
        """The representation_shift section (None where no pass was tested)."""
        if not self.tests:
            return None
        data_sets = [test for test in self.tests if test.kind in DATA_SETS]
        return RepresentationShift.of(
            layer=head.layer,
            reference="clean",
            test="mmd",
            max_samples=SHIFT_MAX_SAMPLES,
            permutations=SHIFT_PERMUTATIONS,
            seed=self.seed,
            tests=self.tests,
            largest=max(data_sets, key=lambda test: test.mmd2) if data_sets else None,
        )


@dataclasses.dataclass(frozen=True)
class FitData:
    """What the detectors are fitted on: features, labels and logits, and what the report calls it."""

    features: np.ndarray
    labels: np.ndarray
    logits: np.ndarray
    name: str


def feature_fit(
    predictor: Any, source: Source, inputs: AuditInputs, num_classes: int, options: AuditOptions, context: RunContext
) -> tuple[FitData, np.ndarray] | None:
    """(the --feature-fit-data pass's features, labels and logits, every clean row scored), or None without it (the
    calibration split's fit part then: `default_fit`). Its classes must be --data's, in order."""
    fit_source = inputs.feature_fit_source
    if fit_source is None:
        return None
    if list(fit_source.class_names) != list(source.class_names):
        raise InputError(
            f"--feature-fit-data {fit_source.name} has the classes {shortened(fit_source.class_names, 4)} but --data "
            f"{shortened(source.class_names, 4)}: fit the detectors on data of the audited classes, in their order"
        )
    from macs_audit.auditing.inference import Loop, evaluate_view

    loop = Loop.of_audit(options, context)
    _, logits = evaluate_view(
        predictor, fit_source, num_classes, loop, description=FIT_PASS, keep_logits=True, accumulate=False
    )
    taps = context.features
    fit = FitData(taps.kept["fit"], np.asarray(fit_source.labels, dtype=np.int64), logits, fit_source.name)
    return fit, np.arange(len(source))


def features_conventions(
    head: Any,
    absent: str | None,
    ood: OODDetection | None,
    taps: FeatureTaps | None = None,
    unfitted: str | None = None,
) -> dict[str, Any]:
    """The report's conventions of the features: the feature detectors' and the two-sample test's, or why the
    features were not read ("features": the reason, where --features auto found none), why the detectors were not
    fitted, and the sets the two-sample test could not run on."""
    if head is None:
        return {"features": f"not read: {absent}"} if absent else {}
    found: dict[str, Any] = {
        "features": f"the input of {head.layer} ({head.source}), float32, read in the logits' pass"
    }
    found["representation_shift"] = two_sample.CONVENTION.replace("2,000", f"{SHIFT_MAX_SAMPLES:,}")
    if ood is not None and ood.features is not None:
        found["feature_ood"] = feature_ood.CONVENTION
    elif unfitted is not None:
        found["feature_ood"] = unfitted
    if taps is not None and taps.notes:
        found["representation_shift_not_tested"] = taps.notes
    return found


def default_fit(
    taps: FeatureTaps, logits: np.ndarray, labels: np.ndarray, split: Split | None
) -> tuple[FitData, np.ndarray]:
    """(the fit data, the in-distribution rows scored) of the clean pass: the calibration split's fit part and the
    rest, or, without a split, every clean image both (said in the name: its in-distribution scores are
    optimistic)."""
    features = taps.kept[CLEAN_PASS]
    if split is None:
        every = np.arange(len(labels))
        return FitData(features, labels, logits, "every image of --data (no calibration split: optimistic)"), every
    fit = FitData(features[split.fit], labels[split.fit], logits[split.fit], FIT_SPLIT)
    return fit, np.asarray(split.scored)


def scored_if_possible(ood: OODDetection, strict: bool, score: Any) -> tuple[OODDetection, str | None]:
    """`score()` (the OOD section with the feature scores), or, where the detectors cannot be fitted on these
    features (too few, constant) and `strict` is off (--features auto), `ood` as it was and why."""
    try:
        return score(), None
    except InputError as error:
        if strict:
            raise
        return ood, f"not fitted: {error}"


def with_feature_scores(
    ood: OODDetection,
    head: Any,
    fit: FitData,
    scored: tuple[np.ndarray, np.ndarray],
    out: tuple[np.ndarray, np.ndarray],
    options: AuditOptions,
) -> OODDetection:
    """`ood` with the feature detectors' scores beside the logit scores: fitted on `fit`, scored on `scored`
    (in-distribution features and logits it was not fitted on) and `out` (the OOD set's), each score's metrics
    with intervals on the same resamples; and the detectors' record (`ood.features`), the histograms of every
    score."""
    detectors = feature_ood.fit_detectors(
        fit.features, fit.labels, fit.logits, head.weight, head.bias, names=FEATURE_DETECTORS
    )
    scores_in, scores_out = detectors.scores(*scored), detectors.scores(*out)
    section = ood_metrics.scores_section(scores_in, scores_out, options.bootstrap, options.seed)
    record = FeatureDetectors.of(
        layer=head.layer,
        source=head.source,
        fit=fit.name,
        n_fit=len(fit.labels),
        n_in=len(scored[0]),
        dimension=int(fit.features.shape[1]),
        notes=detectors.notes(),
        settings=detectors.settings(),
    )
    histograms = {**(ood.histograms or {}), **ood_metrics.histograms(scores_in, scores_out)}
    return dataclasses.replace(ood, scores={**ood.scores, **section}, features=record, histograms=histograms)
