"""`audit_logits`, the audit of a classifier by its saved logits: the clean logits and labels (`SavedLogits`) and
what was saved beside them (`Companions`: OOD and unlabeled sets, shift sets with labels, a reference's logits of
the same samples). The sections that need only predictions are `run_audit`'s on the same logits, bit for bit (the
same `logits_sections`); the shift sets are scored as the model audit scores a set whose classes are all the
model's, and the reference as the parity recorder scores a reference model, on the clean view. The sections that
need the model are null, and the report's conventions.absent_sections says why."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from macs_audit.auditing.calibration import Split, calibration_split
from macs_audit.auditing.features import (
    FeatureTaps,
    default_fit,
    features_conventions,
    scored_if_possible,
    with_feature_scores,
)
from macs_audit.auditing.options import AUTO_BATCH_SIZE, AuditOptions
from macs_audit.auditing.parity import ParityRecorder, SavedReference
from macs_audit.auditing.pipeline import (
    AuditResult,
    CleanPass,
    conventions_of,
    logits_sections,
    now,
    versions,
)
from macs_audit.auditing.shift import PREDICTIONS_FORMAT, saved_shift_section
from macs_audit.auditing.slicing import SliceColumns, slices_conventions
from macs_audit.auditing.trust import Target
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import accumulators
from macs_audit.progress import ProgressFn
from macs_audit.report import DataInfo, ModelInfo, OODDetection, Report, Runtime, Tool
from macs_audit.scores import check_finite
from macs_audit.version import __version__
from macs_audit.views.view import CLEAN

PREDICTIONS = PREDICTIONS_FORMAT  # model.format and data.format of an audit of saved logits
# What an audit of saved logits leaves out (null; `views` empty), and why: its conventions.absent_sections.
NEEDS_THE_MODEL = "needs the model: an audit of saved logits runs no image through it"
ABSENT_FROM_LOGITS = {
    "views": NEEDS_THE_MODEL,
    "robustness": NEEDS_THE_MODEL,
    "corruption_summary": NEEDS_THE_MODEL,
    "shift": "needs shift sets: their saved logits and labels (--shift-predictions NAME=FILE)",
    "real_labels": "needs the images' ReaL labels, which only a model audit of ImageNet reads",
    "parity": "needs a reference's saved logits of the same samples (--reference-predictions FILE)",
}


@dataclasses.dataclass(frozen=True)
class SavedLogits:
    """The audited logits (N, K) and labels (N,); `class_names` in label order; `output_names`, the logits'
    columns' names where a model names them otherwise (its own class names); `source`, the report's data.source."""

    logits: np.ndarray
    labels: np.ndarray
    class_names: Sequence[str]
    output_names: Sequence[str] | None = None
    source: str = "saved logits"
    columns: SliceColumns | None = None  # what the samples are sliced by (auditing/slicing.py)


@dataclasses.dataclass(frozen=True)
class SavedSet:
    """A companion set's saved logits (M, K): OOD or unlabeled samples (labels unused), or a shift set (labels of
    the audited classes). `source`: what its section calls it."""

    source: str
    logits: np.ndarray
    labels: np.ndarray | None = None
    format: str = PREDICTIONS
    features: np.ndarray | None = None  # its penultimate features, where saved


@dataclasses.dataclass(frozen=True)
class Companions:
    """What was saved beside the audited logits: `ood` and `unlabeled` sets, `shift` sets by name, and a
    `reference` (parity.SavedReference: its logits of the same samples, row for row)."""

    ood: SavedSet | None = None
    unlabeled: SavedSet | None = None
    shift: dict[str, SavedSet] = dataclasses.field(default_factory=dict)
    reference: SavedReference | None = None
    # The audited samples' penultimate features (N, D) and the final layer they feed (weight, bias, layer, source:
    # models/features.FeatureHead's fields): the feature-space OOD scores and the representation shift.
    features: np.ndarray | None = None
    head: Any = None


def audit_logits(
    saved: SavedLogits,
    options: AuditOptions | None = None,
    companions: Companions | None = None,
    *,
    model_info: dict | None = None,
    progress: ProgressFn | None = None,
) -> AuditResult:
    """Audit a classifier by its saved logits (the module's docstring). The clean view is accumulated in batches
    of `options.batch_size`, as the model audit's pass accumulated it (runtime.batch_size of its report;
    AUTO_BATCH_SIZE: all at once), which its sums follow to the last bit. `model_info` adds to the report's
    `model` section (format `predictions`), e.g. {"path": ...}. InputError (one line) for arrays that do not fit."""
    options = options or AuditOptions()
    companions = companions or Companions()
    if options.batch_size < 0:
        raise UsageError(f"--batch-size must be positive, got {options.batch_size}")
    logits = checked_logits("logits", saved.logits)
    labels = checked_labels("labels", saved.labels, logits)
    num_classes = logits.shape[1]
    if len(saved.class_names) != num_classes:
        raise InputError(f"class_names name {len(saved.class_names)} classes but the logits have {num_classes} columns")
    targets = {
        purpose: Target(given.source, given.format, checked_logits(f"{purpose}_logits", given.logits, num_classes))
        for purpose, given in (("ood", companions.ood), ("unlabeled", companions.unlabeled))
        if given is not None
    }
    shift_sets = {
        name: (
            given.source,
            checked_logits(f"shift set {name!r}'s logits", given.logits, num_classes),
            checked_labels(f"shift set {name!r}'s labels", given.labels, given.logits),
        )
        for name, given in companions.shift.items()
    }
    split = calibration_split(labels, options.calibration_split, options.seed)
    recorder = None
    if companions.reference is not None:
        reference = companions.reference
        checked_logits("the reference's logits", reference.logits, num_classes)
        if len(reference.logits) != len(logits):
            raise InputError(
                f"the reference has {len(reference.logits):,} rows of logits but the audited {len(logits):,}"
            )
        recorder = ParityRecorder(reference, labels, split, options)
    batch = options.batch_size if options.batch_size != AUTO_BATCH_SIZE else len(logits)
    acc = accumulators.CalibrationAccumulator(num_classes)
    for start in range(0, len(logits), batch):
        rows = slice(start, start + batch)
        acc.update(logits[rows], labels[rows])
        if recorder is not None:  # the reference's rows of the batch, as a model's batch is scored by both
            recorder.observe(
                CLEAN, start, np.arange(start, min(start + batch, len(logits))), labels[rows], logits[rows]
            )
    clean = CleanPass(acc, logits, labels, saved.class_names, saved.output_names or saved.class_names, saved.columns)
    sections = logits_sections(clean, split, options, targets=targets, progress=progress, observer=recorder)
    shift, shift_conventions = saved_shift_section(shift_sets, options, sets=sections.sets, progress=progress)
    ood, taps = sections.trust.ood, None
    if companions.features is not None:  # the model audit's features half, on the saved features
        ood, taps = saved_features(companions, ood, logits, labels, split, options)
    parity = recorder.section() if recorder is not None else None
    present = {"shift": shift is not None, "parity": parity is not None}
    absent = {section: why for section, why in ABSENT_FROM_LOGITS.items() if not present.get(section)}
    trust = sections.trust
    report = Report(
        model=ModelInfo.from_dict({"format": PREDICTIONS, "num_classes": num_classes, **(model_info or {})}),
        data=DataInfo.from_dict(
            {
                "source": saved.source,
                "format": PREDICTIONS,
                "n": len(logits),
                "num_classes": num_classes,
                "class_names": list(saved.class_names),
            }
        ),
        runtime=Runtime.from_dict(
            {**({"batch_size": batch} if options.batch_size != AUTO_BATCH_SIZE else {}), "world_size": 1, **versions()}
        ),
        conventions=conventions_of(
            len(logits),
            options,
            sections.temperature,
            trust.conventions,
            shift_conventions,
            features_conventions(companions.head, None, ood) if taps is not None else {},
            slices_conventions(sections.slices),
            {"absent_sections": absent},
        ),
        seeds={"bootstrap": options.seed, "calibration_split": options.seed, **trust.seeds},
        **{**sections.report_fields(), "ood": ood},
        conformal=trust.conformal,
        representation_shift=taps.section(companions.head) if taps is not None else None,
        shift=shift,
        parity=parity,
        tool=Tool.of(name="macs-audit", version=__version__),
        created=now(),
    )
    return AuditResult(report=report, logits=logits, labels=labels, target_logits=trust.target_logits)


def saved_features(
    companions: Companions,
    ood: OODDetection | None,
    logits: np.ndarray,
    labels: np.ndarray,
    split: Split | None,
    options: AuditOptions,
) -> tuple[OODDetection | None, FeatureTaps]:
    """The OOD section with the feature detectors' scores (where the OOD set's features and the head are saved),
    and the representation shift of the OOD and unlabeled sets' saved features: as the model audit computes them
    from the same features, fitted on the calibration split's fit part."""
    assert companions.features is not None
    features = checked_features("features", companions.features, len(logits))
    taps = FeatureTaps(options.seed)
    taps.kept["clean"] = features
    for purpose, given in (("ood", companions.ood), ("unlabeled", companions.unlabeled)):
        if given is not None and given.features is not None:
            taps.kept[purpose] = checked_features(f"{purpose}_features", given.features, len(given.logits))
            taps.test(purpose, purpose, taps.kept[purpose])
    if ood is not None and companions.head is not None and "ood" in taps.kept and companions.ood is not None:
        fit, rows = default_fit(taps, logits, labels, split)
        scored, out = (features[rows], logits[rows]), (taps.kept["ood"], companions.ood.logits)
        head = companions.head
        ood, _ = scored_if_possible(ood, False, lambda: with_feature_scores(ood, head, fit, scored, out, options))
    return ood, taps


def checked_features(name: str, features: np.ndarray, rows: int) -> np.ndarray:
    """Saved features as float32 (N, D), one row per sample, finite (InputError, one line)."""
    array = np.asarray(features)
    if array.ndim != 2 or len(array) != rows or array.dtype.kind not in "fiu":
        raise InputError(f"{name} must be ({rows}, dimensions) numbers, got {array.dtype} {array.shape}")
    check_finite(name, array)
    return array.astype(np.float32, copy=False)


def checked_logits(name: str, logits: np.ndarray, columns: int | None = None) -> np.ndarray:
    """`logits` as an array, or the InputError of what it is not: a 2-D floating-point array of finite values,
    with at least one row and at least 2 columns (`columns` of them where given)."""
    array = np.asarray(logits)
    if array.ndim != 2:
        raise InputError(f"{name} must be a 2-D array (images, classes), got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.floating):
        raise InputError(f"{name} must be floating point, got {array.dtype}")
    if len(array) == 0:
        raise InputError(f"{name} hold no images")
    if columns is None and array.shape[1] < 2:
        raise InputError(f"{name} must have at least 2 classes, got {array.shape[1]}")
    if columns is not None and array.shape[1] != columns:
        raise InputError(f"{name} have {array.shape[1]} classes but the logits have {columns}")
    bad = ~np.isfinite(array)
    if bad.any():
        row, column = (int(i) for i in np.argwhere(bad)[0])
        raise InputError(
            f"{name} hold {int(bad.sum()):,} NaN or infinite values, the first at row {row}, column {column}"
        )
    return array


def checked_labels(name: str, labels: np.ndarray | None, logits: np.ndarray) -> np.ndarray:
    """`labels` as int64, or the InputError of what they are not: one integer class index per row of `logits`."""
    if labels is None:
        raise InputError(f"{name} are missing: a set scored against labels needs one per row")
    array = np.asarray(labels)
    if array.ndim != 1:
        raise InputError(f"{name} must be a 1-D array (one class index per image), got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"{name} must be integers, got {array.dtype}")
    if len(array) != len(logits):
        raise InputError(f"{len(array)} {name} for {len(logits)} rows of logits")
    num_classes = np.asarray(logits).shape[1]
    outside = np.flatnonzero((array < 0) | (array >= num_classes))
    if len(outside):
        row = int(outside[0])
        raise InputError(f"label {int(array[row])} (row {row}) is out of range for {num_classes} classes")
    return array.astype(np.int64)
