"""The Report's typed sections (docs/report-schema.md): a dataclass per section, a field per key the schema
names, its type the check reading applies (macs_audit.report.reading). Values are fractions (not percent).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from macs_audit.report.reading import Keys, Length, Section, null_when_absent, stored_as

Pair = Annotated[list[float], Length(2)]  # a 95% interval [low, high]
Size = Annotated[list[int], Length(2)]  # [height, width]
# The free-form objects docs/report-schema.md describes key by key:
SetStats = Annotated[
    dict[str, Any],
    Keys(
        threshold=float | None,
        coverage=float,
        mean_set_size=float,
        worst_class_coverage=float,
        worst_class=int,
        coverage_interval=Pair,
        worst_class_coverage_interval=Pair,
        worst_class_n=int,
    ),
]
SetMeans = Annotated[dict[str, Any], Keys(coverage=float, mean_set_size=float, lowest_coverage=float, lowest_view=str)]
DetectionScores = Annotated[
    dict[str, Any], Keys(auroc=float | None, aupr=float | None, fpr95=float | None, intervals=dict[str, Pair])
]
Estimate = Annotated[
    dict[str, Any], Keys(accuracy=float | None, interval=Pair | None, threshold=float | None, offset=float | None)
]
CalibratorRow = Annotated[
    dict[str, Any],
    Keys(method=str, label=str, scores=dict[str, float | None], n_parameters=int, refused=str | None),
]
ClassMatching = Annotated[
    dict[str, Any],
    Keys(by=str, mapped_by=str, num_outputs=int, outputs=list[int], restricted=bool, reason=str),
]
SmoothCurve = Annotated[
    dict[str, Any],
    Keys(sigma=float, confidence=list[float], accuracy=list[float | None], density=list[float]),
]
PredictionSpread = Annotated[
    dict[str, Any],
    Keys(
        classes_predicted=int,
        top_class=int,
        top_class_name=str | None,
        top_class_share=float,
        confidence_min=float,
        confidence_max=float,
    ),
]

# A parity pair's model's preprocessing (the parity section's reference_preprocessing / candidate_preprocessing).
Preprocessing = Annotated[
    dict[str, Any],
    Keys(
        input_size=Size,
        crop_pct=float | None,
        crop_offset=str,
        interpolation=str,
        mean=list[float],
        std=list[float],
        output=str,
        sources=dict[str, str],
    ),
]


@dataclasses.dataclass
class Reliability(Section):
    """Per-bin data of a reliability diagram; `None` marks an empty bin."""

    edges: list[float]
    count: list[int]
    mean_confidence: list[float | None]
    accuracy: list[float | None]


@dataclasses.dataclass
class ViewResult(Section):
    """Metrics of the model on one view of the data (clean, a perturbation, a corruption at a severity)."""

    name: str
    kind: str  # "clean" | "perturbation" | "corruption"
    metrics: dict[str, float]  # metric name (macs_audit.metrics.registry) -> value
    intervals: dict[str, Pair] = dataclasses.field(default_factory=dict)  # name -> 95% [low, high]
    reliability: Reliability | None = null_when_absent()
    corruption: str | None = null_when_absent()
    severity: int | None = null_when_absent()
    family: str | None = null_when_absent()
    # Clean and perturbation views: the smoothed reliability curve at smooth ECE's bandwidth
    # (metrics.smooth_ece.smooth_reliability): sigma, confidence, accuracy (None where too few samples), density.
    smooth_reliability: SmoothCurve | None = None
    # The clean view only: the risk-coverage curve of selective prediction (metrics.selective.curve_points).
    risk_coverage: dict[str, list[float]] | None = None
    # Perturbation and corruption views: the conformal sets' statistics on the held-out images of the view,
    # method -> {coverage, mean_set_size, worst_class_coverage, worst_class} (report.conformal has the clean ones).
    conformal: dict[str, SetStats] | None = None
    # The clean view only: each class's images' n, accuracy, mean confidence and ECE (metrics/per_class.py).
    per_class: list[dict[str, Any]] | None = None
    # Data of a subset of the model's outputs (3.1): the view's metrics over every output, labels as output
    # indices (`metrics` are the restricted convention's: the data's classes only; auditing/classes.py).
    unrestricted: dict[str, float] | None = None
    # The clean view only (3.1): what the model predicts, whatever the labels (metrics/per_class.py's
    # prediction_spread): how many classes it predicts, its most predicted class and share, its confidences' range.
    predictions: PredictionSpread | None = None


@dataclasses.dataclass
class ModelInfo(Section):
    path: str | None = None
    format: str | None = None
    backend: str | None = None
    device: str | None = None
    provider: str | None = None
    sha256: str | None = None
    arch: str | None = None
    num_classes: int | None = None
    input_size: Size | None = None
    mean: list[float] | None = None
    std: list[float] | None = None
    output: str | None = None
    class_names: list[str] | None = None
    crop_pct: float | None = None  # image folders were resized and centre-cropped with it (1.2)
    interpolation: str | None = None  # how images were resized to the input size, where declared
    crop_offset: str | None = None  # how a crop_pct centre crop placed an odd margin: round, or floor (3.0)
    model_args: dict[str, Any] | None = None  # a timm architecture's keyword arguments, where declared (3.0)
    precision: str | None = None  # torch models: fp32, or the CUDA autocast dtype (bf16, fp16) asked for
    config_sources: dict[str, str] | None = None
    checkpoint_prefix_stripped: str | None = None  # the wrapper prefix taken off every state-dict key
    warnings: list[str] | None = None  # what the user should know about how the model was read


@dataclasses.dataclass
class DataInfo(Section):
    source: str | None = None
    format: str | None = None
    n: int | None = None
    num_classes: int | None = None
    class_names: list[str] | None = None
    split: str | None = None
    limit: int | None = None
    limit_seed: int | None = None
    pipeline: str | None = None  # image folders: how images were sized to the model's input (1.2)
    class_matching: ClassMatching | None = None  # how the classes met the model's outputs (3.1, auditing/classes.py)
    damaged_shards_skipped: int | None = None  # shards read with --skip-damaged-shards: how many were left out (3.1)


@dataclasses.dataclass
class Runtime(Section):
    device: str | None = None
    provider: str | None = None
    batch_size: int | None = None
    world_size: int | None = None
    python: str | None = None
    numpy: str | None = None
    onnxruntime: str | None = None
    torch: str | None = None


@dataclasses.dataclass
class Conventions(Section):
    """How every metric was computed: descriptions, plus the numbers the formats use."""

    softmax: str | None = None
    ece_bins: int | None = None
    ece_bin_edges: str | None = None
    adaptive_ece: str | None = None
    classwise_ece: str | None = None
    smooth_ece: str | None = None
    l2_ece: str | None = None
    debiased_l2_ece: str | None = None
    ece_sweep: str | None = None
    nll: str | None = None
    brier: str | None = None
    margin: str | None = None
    margin_target: float | None = None
    units: str | None = None
    bootstrap: str | None = None
    bootstrap_resamples: int | None = None
    bootstrap_note: str | None = None  # why the views have no intervals although resamples were asked for
    small_sample: list[str] | None = None  # estimates made on fewer images than they need (audit.calibration)
    perturbations: dict[str, Any] | None = None
    robustness_ratio: str | None = None  # over which images margin and L^ are taken
    flip_radius: str | None = None  # over which images the median flip radius is taken
    selective: str | None = None  # AURC, risk at coverage, misclassification AUROC
    conformal: str | None = None
    ood: str | None = None
    label_free: str | None = None  # ATC and DoC
    shift: str | None = None  # the natural-shift sets' two conventions (restricted, unrestricted)
    class_matching: str | None = None  # data of a subset of the outputs: the restricted convention (3.1)
    rms_calibration_error: str | None = None  # the shift papers' RMS calibration error
    real_labels: str | None = None  # how the ReaL labels score a prediction
    # The bars the summary judged problems by where `evaluate --problem-bars` changed them (3.1; formats/summary.py).
    problem_bars: dict[str, float] | None = None
    # An audit of saved logits (3.2; audit.audit_logits): each section it leaves out, and why.
    absent_sections: dict[str, str] | None = None


# One option's record in `settings.options`: its resolved value and where it came from.
OptionRecord = Annotated[dict[str, Any], Keys(value=Any, source=str)]


@dataclasses.dataclass
class Settings(Section):
    """The `settings` section (3.2): how the run was configured. `spec`: the spec file read (settings/spec.py),
    its SHA-256; `options`: every option given or defaulted to a value, {"value", "source"} with the source
    flag, spec, preset or default (settings/resolve.py)."""

    command: str | None = None
    spec: str | None = None
    spec_sha256: str | None = None
    preset: str | None = None
    options: dict[str, OptionRecord] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Tool(Section):
    name: str | None = None
    version: str | None = None


@dataclasses.dataclass(kw_only=True)
class TemperatureFit(Section):
    """The `temperature_scaling` section: T fitted on a held-out part of the data (calibrators/temperature.py,
    `optimal_temperature`); `raw` and `scaled` metrics on the rest."""

    temperature: float
    fit_fraction: float | None = None
    n_fit: int | None = None
    n_eval: int | None = None
    split: str | None = None  # how the held-out part was drawn
    seed: int | None = None
    raw: dict[str, float]  # metric name (registry.TEMPERATURE_METRICS) -> value
    scaled: dict[str, float]
    # The reliability bins of the scored part before and after dividing by T (the HTML draws them side by side).
    raw_reliability: Reliability | None = None
    scaled_reliability: Reliability | None = None


@dataclasses.dataclass(kw_only=True)
class Calibrators(Section):
    """Post-hoc calibrators fitted on the temperature's held-out part and scored on the rest, for information
    (calibrators/selection.py): `methods` rows hold method, label and either scores (registry names) and
    n_parameters, or `refused` (why the part was too small to fit it); the first row is the uncalibrated model."""

    select: str  # the score `selected` is best by
    selected: str
    n_fit: int
    n_eval: int
    methods: list[CalibratorRow]
    split: str | None = None
    seed: int | None = None
    reason: str | None = None  # why `selected` won: the simpler map unless beaten beyond the split's noise


@dataclasses.dataclass
class MarginHistogram(Section):
    edges: list[float]
    counts: list[int]


@dataclasses.dataclass
class Sensitivity(Section):
    """The input sensitivity L^ of the logit margin, in [0,1] pixel space: the mean norm of its input gradient
    (metrics/sensitivity.py). The JSON keeps the schema's keys for it, `lipschitz`, `lipschitz_error` and
    `lipschitz_error_note`: L^ is the estimate of a local Lipschitz constant a mean gradient norm gives."""

    mean_gradient_norm: float = stored_as("lipschitz")
    # Null for a finite-difference estimate from one image:
    mean_gradient_norm_error: float | None = stored_as("lipschitz_error", default=None)
    mean_gradient_norm_error_note: str | None = stored_as("lipschitz_error_note", default=None)  # why it is null
    method: str | None = None
    n: int | None = None
    mean_margin_subset: float | None = None
    median_flip_radius: float | None = None  # over the correctly classified images of the subset
    flip_radius_samples: int | None = None  # how many they are
    units: str | None = None


@dataclasses.dataclass
class Robustness(Section):
    """Keys appear only if their part of the audit ran."""

    robust_accuracy: float | None = None
    robust_view: str | None = None
    sensitivity: Sensitivity | None = None
    robustness_ratio: float | None = None  # null when L^ is 0
    median_flip_radius: float | None = None


@dataclasses.dataclass
class CorruptionMeans(Section):
    """One corruption's metrics, each the mean over the severities that ran."""

    family: str
    extra: bool  # not one of the 15 benchmark corruptions
    severities: list[int]
    accuracy: float
    ece: float
    nll: float
    brier: float


@dataclasses.dataclass
class FamilyMeans(Section):
    accuracy: float
    ece: float
    corruptions: list[str]


@dataclasses.dataclass
class CorruptionSummary(Section):
    """The corruption grid summarised (macs_audit.metrics.corruption_summary)."""

    corruptions: dict[str, CorruptionMeans]
    families: dict[str, FamilyMeans]
    per_severity: dict[str, dict[str, float]]  # "1" -> {accuracy, ece}
    severities: list[int]
    clean_accuracy: float
    mean_accuracy_15: float | None = None  # only when all 15 benchmark corruptions ran
    mean_ece_15: float | None = None
    mean_accuracy_19: float | None = None  # only when all 19 ran
    mean_ece_19: float | None = None
    mean_corruption_error_unnormalized: float | None = None  # 1 - mean_accuracy_15 (schema 2.x: `mce_unnormalized`)
    mean_accuracy_selected: float | None = None
    # Only with a corruption baseline report:
    baseline: dict[str, Any] | None = None
    ce: dict[str, float | None] | None = None
    relative_ce: dict[str, float | None] | None = None
    mean_corruption_error: float | None = None  # mCE: the mean of the CEs (schema 1.x: `mce`)
    relative_mean_corruption_error: float | None = None  # the mean of relative_ce (schema 2.x: `relative_mce`)
    baseline_corruptions: list[str] | None = None
    source: str | None = None
    frost_textures: str | None = None
    corruption_set: str | None = None  # the parameter set: cifar, tiny-imagenet or imagenet
    corruption_set_choice: str | None = None  # how it was chosen (auto, the flag, or released files)
    image_size: list[int] | None = None  # [height, width] of the images corrupted


@dataclasses.dataclass(kw_only=True)
class Conformal(Section):
    """Split conformal prediction sets (metrics/conformal.py), fitted on the temperature's held-out part.

    `methods` maps a method (lac, aps) to {threshold (null: every class), coverage, mean_set_size,
    worst_class_coverage, worst_class} on the held-out part of the clean data; every perturbation and
    corruption view holds the same sets' statistics on its images (ViewResult.conformal), and
    `corruption_mean` maps a method to their mean coverage and set size over the corruption views and the
    lowest view coverage (`lowest_coverage`, `lowest_view`)."""

    target_coverage: float
    n_calibration: int
    n_eval: int
    methods: dict[str, SetStats]
    split: str | None = None
    seed: int | None = None
    corruption_mean: dict[str, SetMeans] | None = None


@dataclasses.dataclass(kw_only=True)
class FeatureDetectors(Section):
    """The feature-space OOD detectors (3.3; metrics/feature_ood.py): the layer whose input the features are and
    how it was found, what they were fitted on (`fit`, `n_fit`), the in-distribution samples they scored (`n_in`:
    the calibration split's other part when fitted on its fit part), the features' dimension, one-line notes (k,
    principal dimension, thresholds, shrinkage) and each detector's fitted settings."""

    layer: str
    source: str
    fit: str
    n_fit: int
    n_in: int
    dimension: int
    notes: list[str] = dataclasses.field(default_factory=list)
    settings: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(kw_only=True)
class OODDetection(Section):
    """Out-of-distribution detection against a second data set (metrics/ood.py): `scores` maps a score (msp,
    max_logit, energy, gen; with the model's features the feature detectors too: mahalanobis, rmds, knn, vim,
    react, ash_s) to {auroc, aupr, fpr95, intervals: {auroc, aupr, fpr95: [low, high]}}; `histograms`, each
    score's in- and out-of-distribution counts over shared bins (3.3), for the HTML's plots."""

    source: str
    format: str | None = None
    n_in: int
    n_out: int
    scores: dict[str, DetectionScores]
    bootstrap_resamples: int | None = None
    seed: int | None = None
    features: FeatureDetectors | None = None
    histograms: dict[str, dict[str, list[float]]] | None = None


@dataclasses.dataclass(kw_only=True)
class ShiftTest(Section):
    """One view's features against the clean evaluation features (metrics/two_sample.py): the unbiased MMD^2,
    the MMD (the effect size), the permutation p-value, the kernel's bandwidth, the samples each side used."""

    name: str
    kind: str  # the view's kind: perturbation, corruption, shift, ood, unlabeled
    n: int
    n_reference: int
    mmd2: float
    mmd: float
    p_value: float
    bandwidth: float


@dataclasses.dataclass(kw_only=True)
class RepresentationShift(Section):
    """Is the data a view meets what the model was validated on (3.3)? Each view's penultimate features tested
    against the clean evaluation features' (`reference`), per `tests`; `largest`, the test of the --unlabeled and
    --shift-data sets with the largest MMD (the gate's `max_representation_mmd`), absent without them."""

    layer: str
    reference: str
    test: str
    max_samples: int
    permutations: int
    seed: int
    tests: list[ShiftTest]
    largest: ShiftTest | None = None


@dataclasses.dataclass(kw_only=True)
class Unlabeled(Section):
    """Accuracy on unlabeled data estimated without labels (metrics/label_free.py): `estimates` maps an
    estimator (atc_mc, atc_ne, doc) to {accuracy, interval, and its fitted threshold or offset}."""

    source: str
    format: str | None = None
    n: int
    source_accuracy: float  # of the labelled evaluation data the estimators were fitted on
    estimates: dict[str, Estimate]
    bootstrap_resamples: int | None = None
    seed: int | None = None


@dataclasses.dataclass(kw_only=True)
class ShiftSetResult(Section):
    """One natural-shift set (`--shift-data NAME=DIR`): its classes mapped to the model's outputs
    (data/label_space.py, `mapped_by`), scored under both conventions: `restricted` (softmax over the set's
    classes' logits) and `unrestricted` (softmax over every output; a prediction outside the set is wrong)."""

    source: str
    format: str | None = None
    n: int
    num_classes: int
    num_outputs: int
    mapped_by: str
    restricted: ViewResult
    unrestricted: ViewResult


@dataclasses.dataclass(kw_only=True)
class Shift(Section):
    """The natural-shift sets (auditing/shift.py): each set's two views, and `mean`: convention (restricted,
    unrestricted) -> metric -> its mean over the sets."""

    sets: dict[str, ShiftSetResult]
    mean: dict[str, dict[str, float]]
    default_convention: str = "restricted"


# A difference of one metric between a candidate and its reference (auditing/parity.py): both values, candidate -
# reference, and its paired 95% bootstrap interval (null without resamples).
MetricDifference = Annotated[
    dict[str, Any], Keys(reference=float, candidate=float, difference=float, interval=Pair | None)
]


@dataclasses.dataclass(kw_only=True)
class ParityView(Section):
    """One view scored by the candidate (the audited model) and its reference on the same images: top-1
    agreement, the flips against the labels, logit and softmax differences, `metrics`: metric -> its
    MetricDifference, and `conformal`: method -> both models' sets at the reference's and the candidate's
    thresholds on the calibration split's scored part, with the paired differences (null without a split)."""

    name: str
    kind: str
    corruption: str | None = null_when_absent()
    severity: int | None = null_when_absent()
    n: int
    agreement: float
    agreement_interval: Pair | None = null_when_absent()
    correct_to_wrong: int
    wrong_to_correct: int
    mean_abs_logit_difference: float
    max_abs_logit_difference: float
    mean_kl: float
    metrics: dict[str, MetricDifference]
    conformal: dict[str, dict[str, Any]] | None = null_when_absent()


@dataclasses.dataclass(kw_only=True)
class Parity(Section):
    """The audited model against a reference (`evaluate CANDIDATE --reference REFERENCE`): the reference's
    file, device and provider (the candidate's are the report's model and runtime), every view's ParityView."""

    reference: ModelInfo
    bootstrap_resamples: int
    seed: int
    views: list[ParityView]
    # Each model's preprocessing and where each value came from (3.1; auditing/parity.py's preprocessing_record).
    reference_preprocessing: Preprocessing | None = None
    candidate_preprocessing: Preprocessing | None = None
    # What pairing the two models' preprocessing said (3.1): a side that took the other's settings, a reference
    # left with CIFAR-10's built-in mean/std (auditing/parity.py's pair_preprocessing).
    warnings: list[str] | None = None
    # How the reference's outputs met the candidate's (3.3): null where both models scored the same images in one
    # pass; "id" or "row" for saved predictions (--reference-predictions), paired by the files' ids or by row.
    paired_by: str | None = None

    def view(self, name: str) -> ParityView | None:
        return next((v for v in self.views if v.name == name), None)


@dataclasses.dataclass(kw_only=True)
class RealLabels(Section):
    """The ImageNet ReaL labels' scores of the clean view (metrics/real_labels.py): a top-1 is right when it is any
    of the image's ReaL labels; images without one are left out (`n_without_labels`); the original labels'
    accuracy and ECE on the same images beside them."""

    source: str
    n: int
    n_without_labels: int
    accuracy_real: float | None = None
    accuracy_original: float | None = None
    ece_real: float | None = None
    ece_original: float | None = None
    rms_calibration_error_real: float | None = None
    intervals: dict[str, Pair] | None = None  # 95% percentile-bootstrap intervals of the accuracies and ECEs
    bootstrap_resamples: int | None = None
    seed: int | None = None


# A slice's difference from the rest of the data (metrics/slices.py): slice less rest, its 95% interval, the test's
# p-value, the p-value adjusted over every test of the section, and whether that is at most the section's level.
SliceGap = Annotated[
    dict[str, Any], Keys(gap=float, interval=Pair, p_value=float, adjusted_p_value=float, significant=bool)
]
SliceCoverage = Annotated[dict[str, Any], Keys(coverage=float, coverage_interval=Pair, n=int)]
SmallSlice = Annotated[dict[str, Any], Keys(column=str, value=str, n=int, rest=str)]
Multicalibration = Annotated[
    dict[str, Any], Keys(error=float, column=str | None, value=str | None, bin=Pair, n=int, min_size=int)
]
SliceColumn = Annotated[dict[str, Any], Keys(source=str, kind=str, missing=int)]


def slice_label(column: object, value: object) -> str:
    """'lighting = dark', 'brightness = [0.2, 0.4)': a slice by its column and value (a numeric column's bin); 'the
    whole data' for none (the multicalibration error's place when no slice holds it). Not escaped: each output does."""
    return "the whole data" if column is None else f"{column} = {value}"


def multicalibration_where(found: dict[str, Any]) -> str:
    """'lighting = dark, confidence (0.8, 0.867]': where a slice section's multicalibration error is, its bin in the
    ECE's (lo, hi] convention."""
    where = slice_label(found.get("column"), found.get("value"))
    low, high = (found.get("bin") or (None, None))[:2]
    if isinstance(low, (int, float)) and isinstance(high, (int, float)):
        where += f", confidence ({low:.3g}, {high:.3g}]"
    return where


@dataclasses.dataclass(kw_only=True)
class SliceResult(Section):
    """One slice of at least the section's `min_size` images: its metrics (accuracy, ece, nll, mean_confidence,
    overconfidence) with their 95% bootstrap intervals, each conformal method's coverage on its scored images,
    its gaps to the rest (accuracy, overconfidence) and whether either is significant after the correction."""

    column: str
    value: str
    bounds: Pair | None = None  # a numeric column's bin [lo, hi)
    n: int
    metrics: dict[str, float]
    intervals: dict[str, Pair]
    coverage: dict[str, SliceCoverage] | None = None
    gaps: dict[str, SliceGap]
    significant: bool

    def worse(self) -> bool:
        """Significantly less accurate or more overconfident than the rest (not merely different from it)."""
        accuracy, overconfidence = self.gaps.get("accuracy") or {}, self.gaps.get("overconfidence") or {}
        return bool(accuracy.get("significant") and accuracy.get("gap", 0) < 0) or bool(
            overconfidence.get("significant") and overconfidence.get("gap", 0) > 0
        )


@dataclasses.dataclass(kw_only=True)
class Slices(Section):
    """The data cut into slices (3.4; auditing/slicing.py, metrics/slices.py): by the columns of a metadata file
    (`metadata` says how it met the data) or of the data itself, and by properties of the images; `slices` sorted by
    the accuracy gap, worst first; `small`, those below `min_size`, not scored; `skipped`, columns not sliced and
    why; the `multicalibration` error and where it is."""

    columns: dict[str, SliceColumn]
    metadata: dict[str, Any] | None = None
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    bins: int
    min_size: int
    correction: str
    level: float
    tests: int
    bootstrap_resamples: int
    seed: int
    slices: list[SliceResult]
    small: list[SmallSlice]
    multicalibration: Multicalibration | None = None

    def significant(self) -> list[SliceResult]:
        """The slices that differ from the rest after the correction, worst accuracy gap first."""
        return [s for s in self.slices if s.significant]

    def worse(self) -> list[SliceResult]:
        """The slices significantly worse than the rest (SliceResult.worse), worst accuracy gap first."""
        return [s for s in self.slices if s.worse()]
