"""`run_audit`, the driver: check the inputs, draw the calibration split, run the clean view and the OOD and
unlabeled sets' passes, make what their logits alone give (`logits_sections`), then the robustness and shift
halves, and assemble the Report once, in that order. `audit_logits` audits saved logits: the same
`logits_sections`, so that its sections are the model audit's bit for bit."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

import numpy as np

from macs_audit.auditing.calibration import (
    Split,
    calibration_split,
    calibrators_section,
    conformal_fit,
    helpful_temperature,
    small_sample_notes,
    temperature_section,
)
from macs_audit.auditing.classes import CONVENTION as CLASS_MATCHING
from macs_audit.auditing.classes import match_classes, matching_record, restricted
from macs_audit.auditing.inference import Loop, ViewObserver, evaluate_view, view_result
from macs_audit.auditing.options import AUTO_BATCH_SIZE, DEFAULT_CONTEXT, AuditInputs, AuditOptions, RunContext, sized
from macs_audit.auditing.parity import ParityRecorder, check_pair
from macs_audit.auditing.robustness import (
    RobustnessResult,
    audit_robustness,
    check_corruption_data,
    corruption_summary,
)
from macs_audit.auditing.shift import audit_shift, real_labels_section
from macs_audit.auditing.trust import Target, TrustResult, audit_trust, target_logits, with_corruption_mean
from macs_audit.data.sources import Source
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import accumulators, bootstrap, conformal
from macs_audit.metrics.per_class import per_class_stats, prediction_spread
from macs_audit.models.predictor import Predictor
from macs_audit.progress import ProgressFn
from macs_audit.report import (
    Calibrators,
    Conventions,
    DataInfo,
    MarginHistogram,
    ModelInfo,
    Report,
    Runtime,
    TemperatureFit,
    Tool,
    ViewResult,
)
from macs_audit.version import __version__
from macs_audit.views import view as views

PREDICTIONS = "predictions"  # model.format and data.format of an audit of saved logits (`audit_logits`)
# What an audit of saved logits leaves out (null; `views` empty), and why: its conventions.absent_sections.
NEEDS_THE_MODEL = "needs the model: an audit of saved logits runs no image through it"
ABSENT_FROM_LOGITS = {
    "views": NEEDS_THE_MODEL,
    "robustness": NEEDS_THE_MODEL,
    "corruption_summary": NEEDS_THE_MODEL,
    "shift": NEEDS_THE_MODEL,
    "real_labels": "needs the images' ReaL labels (run_audit's AuditInputs.real_labels)",
    "parity": "needs the model and a reference scored on the same images (run_audit's reference)",
}


@dataclasses.dataclass(frozen=True)
class AuditResult:
    report: Report
    logits: np.ndarray  # clean-view logits, float32 (N, K)
    labels: np.ndarray
    target_logits: dict = dataclasses.field(default_factory=dict)  # the --ood-data and --unlabeled logits


@dataclasses.dataclass(frozen=True)
class CleanPass:
    """The clean view's pass, the model's or saved logits: its accumulator, logits (N, K) and labels (N,), the
    data's class names and the names of the logits' columns (None: by index)."""

    acc: accumulators.CalibrationAccumulator
    logits: np.ndarray
    labels: np.ndarray
    class_names: Sequence[str]
    output_names: Sequence[str] | None


@dataclasses.dataclass(frozen=True)
class LogitsSections:
    """What the audit makes of the clean view's logits and labels alone (`logits_sections`)."""

    clean: ViewResult
    sets: conformal.SplitConformal | None  # fitted on the calibration split: the other views score them too
    temperature: TemperatureFit | None
    calibrators: Calibrators | None
    trust: TrustResult  # its conformal section without the corruption views' mean (trust.with_corruption_mean)
    margin_histogram: MarginHistogram

    def report_fields(self) -> dict:
        """The Report's fields these sections fill alike in either audit (the conformal section with the
        corruption views' mean is the model audit's own)."""
        return {
            "clean": self.clean,
            "temperature_scaling": self.temperature,
            "calibrators": self.calibrators,
            "margin_histogram": self.margin_histogram,
            "ood": self.trust.ood,
            "unlabeled": self.trust.unlabeled,
        }


def logits_sections(
    clean: CleanPass,
    split: Split | None,
    options: AuditOptions,
    *,
    targets: dict[str, Target],
    progress: ProgressFn | None = None,
    observer: ViewObserver | None = None,
) -> LogitsSections:
    """Everything the `clean` pass gives, with the OOD and unlabeled `targets`' logits: the clean view's section
    (its intervals; per class; what the model predicts), the conformal sets, the temperature, the calibrators, and
    the conformal, OOD and label-free sections. `observer`: the clean pass's (the parity section's)."""
    acc, logits, labels = clean.acc, clean.logits, clean.labels
    section = view_result(views.CLEAN, acc, options.bootstrap, options.seed, progress, observer=observer)
    sets = conformal_fit(
        logits,
        labels,
        split,
        coverage=options.coverage,
        progress=progress,
        conformal_split=options.conformal_split,
        raps=options.raps,
    )
    section = dataclasses.replace(
        section,
        per_class=per_class_stats(logits, labels, list(clean.class_names), sets),
        predictions=prediction_spread(logits, list(clean.output_names) if clean.output_names else None),
    )
    temperature = temperature_section(logits, labels, acc.num_classes, split, progress=progress)
    trust = audit_trust(
        logits,
        labels,
        options,
        sets=sets,
        targets=targets,
        progress=progress,
        temperature=helpful_temperature(temperature),
    )
    calibrators = calibrators_section(logits, labels, options.calibrators, split, progress=progress)
    return LogitsSections(section, sets, temperature, calibrators, trust, margin_histogram(acc))


def run_audit(
    predictor: Predictor,
    source: Source,
    options: AuditOptions | None = None,
    inputs: AuditInputs | None = None,
    *,
    data_info: dict | None = None,
    reference: Predictor | None = None,
    context: RunContext = DEFAULT_CONTEXT,
) -> AuditResult:
    """Audit `predictor` on `source` with `options`, and the OOD, unlabeled and shift sets, class map, ReaL labels
    and corruption baseline of `inputs`; `data_info` adds to the report's data section. Under torch.distributed
    (context.ctx), every rank returns the same Report. With `reference`, the report's parity section: the reference
    scored on the same batches of every view (auditing/parity.py), in the same pass; what pairing the two models'
    preprocessing says (a side that takes the other's mean, ...) goes to `context.on_warning` as the audit begins,
    and into the section's `warnings`."""
    options = sized(options or AuditOptions(), predictor.config)
    inputs = inputs or AuditInputs()
    ctx, progress = context.ctx, context.progress
    if options.batch_size < 1:
        raise UsageError(f"--batch-size must be positive, got {options.batch_size}")
    # The data's classes met the model's outputs by name, index, class map or position (auditing/classes.py); the
    # predictor scores them in the data's class order, restricted to them: every view, fit and set below.
    space = match_classes(predictor, source, inputs.class_map, inputs.class_map_name)
    full_predictor, predictor = predictor, restricted(predictor, space)
    num_classes = len(space.classes)
    if not space.is_identity and inputs.real_labels is not None:
        raise InputError(
            f"--real-labels scores ImageNet's 1,000 outputs in order, but {source.name}'s classes map to the model's "
            f"outputs otherwise (by {space.mapped_by})"
        )
    # A --corrupted-data folder of other data or no parameter set for the images fails before the clean pass;
    # the folder's files are the caller's to check before it loads the model (check_corruption_files).
    parameters = check_corruption_data(options, source)
    split = calibration_split(source.labels, options.calibration_split, options.seed)
    recorder = None
    if reference is not None:
        if ctx.active:
            raise UsageError("--reference does not run under torchrun: run the parity audit in one process")
        if not space.is_identity and inputs.shift_sets:
            raise UsageError(
                "--reference with --shift-data needs --data whose classes are the model's outputs in order; "
                "run the parity audit without --shift-data"
            )
        paired = check_pair(reference, full_predictor)  # the two models as they are; then each on the data's classes
        if context.on_warning is not None:
            for line in paired:
                context.on_warning(line)
        reference = restricted(reference, match_classes(reference, source, inputs.class_map, inputs.class_map_name))
        recorder = ParityRecorder(
            reference, source.labels, split, options, shift_sets=inputs.shift_sets, candidate=predictor, warnings=paired
        )
    acc, logits = evaluate_view(
        predictor, source, num_classes, Loop.of_audit(options, context, recorder), keep_logits=True
    )
    assert logits is not None
    # The output names are indexed by the logits' columns: the model's outputs in order (its own class names, else
    # the data's, matched by position then), or the data's classes where the predictor is restricted to them.
    output_names = (space.is_identity and full_predictor.config.class_names) or source.class_names
    sections = logits_sections(
        CleanPass(acc, logits, source.labels, source.class_names, output_names),
        split,
        options,
        targets=target_logits(predictor, inputs, num_classes, options, context),
        progress=progress,
        observer=recorder,
    )
    robustness = RobustnessResult()
    if options.perturbations or options.sensitivity_samples or options.corruptions:
        robustness = audit_robustness(
            predictor,
            source,
            num_classes,
            options,
            parameters=parameters,
            sets=sections.sets,
            context=context,
            observer=recorder,
        )
    summary = None
    if parameters is not None:  # the corruption grid ran
        summary = corruption_summary(robustness.views, sections.clean, options, parameters, inputs.corruption_baseline)
    trust = sections.trust
    # The shift sets map to the model's own outputs; the clean sets are scored on them where they were fitted there.
    shift, shift_conventions = audit_shift(
        full_predictor,
        inputs.shift_sets,
        options,
        sets=sections.sets if space.is_identity else None,
        context=context,
        observer=recorder,
    )
    real, real_conventions = real_labels_section(
        logits, source.labels, inputs.real_labels, resamples=options.bootstrap, seed=options.seed
    )
    report = Report(
        model=ModelInfo.from_dict(
            {
                **predictor.info,
                **predictor.config.as_metadata(),
                "output": predictor.output.describe(),
                "config_sources": dict(predictor.config.sources),
            }
        ),
        data=DataInfo.from_dict(
            {
                "source": source.name,
                "format": source.format,
                "n": len(source),
                "num_classes": num_classes,
                "class_names": list(source.class_names),
                "class_matching": matching_record(space, full_predictor, source),
                **(data_info or {}),
            }
        ),
        runtime=Runtime.from_dict(
            {
                "device": predictor.info["device"],
                "provider": predictor.info["provider"],
                "batch_size": options.batch_size,
                "world_size": ctx.world_size,
                **_versions(),
            }
        ),
        conventions=_conventions(
            len(source),
            options,
            sections.temperature,
            robustness.conventions,
            trust.conventions,
            shift_conventions,
            real_conventions,
            {"class_matching": CLASS_MATCHING} if space.is_subset else {},
        ),
        seeds={"bootstrap": options.seed, "calibration_split": options.seed, **robustness.seeds, **trust.seeds},
        **sections.report_fields(),
        views=robustness.views,
        robustness=robustness.section,
        corruption_summary=summary,
        conformal=with_corruption_mean(trust.conformal, robustness.views),
        shift=shift,
        real_labels=real,
        parity=recorder.section() if recorder is not None else None,
        tool=Tool.of(name="macs-audit", version=__version__),
        created=_now(),
    )
    return AuditResult(report=report, logits=logits, labels=source.labels.copy(), target_logits=trust.target_logits)


def audit_logits(
    logits: np.ndarray,
    labels: np.ndarray,
    options: AuditOptions | None = None,
    *,
    class_names: Sequence[str],
    ood_logits: np.ndarray | None = None,
    unlabeled_logits: np.ndarray | None = None,
    model_info: dict | None = None,
    progress: ProgressFn | None = None,
) -> AuditResult:
    """Audit a classifier by its saved logits (N, K) on labelled images, `labels` (N,), its classes named by
    `class_names`; `ood_logits` and `unlabeled_logits`, its logits on OOD data and on unlabeled images, give the
    OOD and label-free sections. The sections that need only predictions are those of `run_audit` on the same
    logits with the same options, bit for bit: the clean view with its intervals, the temperature, the
    calibrators, the conformal, OOD and unlabeled sections, the margin histogram. The clean view is
    accumulated in batches of `options.batch_size`, as the model audit's pass accumulated it (runtime.batch_size
    of its report; AUTO_BATCH_SIZE: all at once), which its sums follow to the last bit. The sections that need
    the model are null, `conventions.absent_sections` says why. `model_info` adds to the report's `model` section
    (format `predictions`), e.g. {"path": ..., "arch": ...}."""
    options = options or AuditOptions()
    if options.batch_size < 0:
        raise UsageError(f"--batch-size must be positive, got {options.batch_size}")
    logits = _checked_logits("logits", logits)
    labels = _checked_labels(labels, logits)
    num_classes = logits.shape[1]
    if len(class_names) != num_classes:
        raise InputError(f"class_names name {len(class_names)} classes but the logits have {num_classes} columns")
    targets = {
        purpose: Target(f"{purpose}_logits", PREDICTIONS, _checked_logits(f"{purpose}_logits", given, num_classes))
        for purpose, given in (("ood", ood_logits), ("unlabeled", unlabeled_logits))
        if given is not None
    }
    split = calibration_split(labels, options.calibration_split, options.seed)
    batch = options.batch_size if options.batch_size != AUTO_BATCH_SIZE else len(logits)
    acc = accumulators.CalibrationAccumulator(num_classes)
    for start in range(0, len(logits), batch):
        acc.update(logits[start : start + batch], labels[start : start + batch])
    clean = CleanPass(acc, logits, labels, class_names, class_names)
    sections = logits_sections(clean, split, options, targets=targets, progress=progress)
    trust = sections.trust
    report = Report(
        model=ModelInfo.from_dict({"format": PREDICTIONS, "num_classes": num_classes, **(model_info or {})}),
        data=DataInfo.from_dict(
            {
                "source": "saved logits",
                "format": PREDICTIONS,
                "n": len(logits),
                "num_classes": num_classes,
                "class_names": list(class_names),
            }
        ),
        runtime=Runtime.from_dict(
            {**({"batch_size": batch} if options.batch_size != AUTO_BATCH_SIZE else {}), "world_size": 1, **_versions()}
        ),
        conventions=_conventions(
            len(logits), options, sections.temperature, trust.conventions, {"absent_sections": ABSENT_FROM_LOGITS}
        ),
        seeds={"bootstrap": options.seed, "calibration_split": options.seed, **trust.seeds},
        **sections.report_fields(),
        conformal=trust.conformal,
        tool=Tool.of(name="macs-audit", version=__version__),
        created=_now(),
    )
    return AuditResult(report=report, logits=logits, labels=labels, target_logits=trust.target_logits)


def _checked_logits(name: str, logits: np.ndarray, columns: int | None = None) -> np.ndarray:
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
    if not np.isfinite(array).all():
        raise InputError(f"{name} hold NaN or infinite values")
    return array


def _checked_labels(labels: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """`labels` as int64, or the InputError of what they are not: one integer class index per row of `logits`."""
    array = np.asarray(labels)
    if array.ndim != 1:
        raise InputError(f"labels must be a 1-D array (one class index per image), got shape {array.shape}")
    if not np.issubdtype(array.dtype, np.integer):
        raise InputError(f"labels must be integers, got {array.dtype}")
    if len(array) != len(logits):
        raise InputError(f"{len(array)} labels for {len(logits)} rows of logits")
    num_classes = logits.shape[1]
    outside = array[(array < 0) | (array >= num_classes)]
    if len(outside):
        raise InputError(f"label {int(outside[0])} is out of range for {num_classes} classes")
    return array.astype(np.int64)


def _conventions(n: int, options: AuditOptions, temperature: TemperatureFit | None, *parts: dict) -> Conventions:
    """The report's conventions: the metrics', the bootstrap's and the small-sample notes, then each part's."""
    merged = {
        **accumulators.CONVENTIONS,
        "bootstrap": bootstrap.CONVENTION,
        "bootstrap_resamples": options.bootstrap,
        **_bootstrap_note(n, options.bootstrap),
        **_small_sample(n, temperature),
    }
    for part in parts:
        merged.update(part)
    return Conventions.from_dict(merged)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def margin_histogram(acc: accumulators.CalibrationAccumulator, bins: int = 40) -> MarginHistogram:
    margins = acc.samples()["margin"]
    lo, hi = float(np.floor(margins.min())), float(np.ceil(margins.max()))
    counts, edges = np.histogram(margins, bins=bins, range=(lo, hi if hi > lo else lo + 1))
    return MarginHistogram.of(edges=edges.tolist(), counts=counts.tolist())


def _small_sample(n: int, temperature: TemperatureFit | None) -> dict[str, list[str]]:
    notes = small_sample_notes(n, temperature, accumulators.N_BINS)
    return {"small_sample": notes} if notes else {}


def _bootstrap_note(n: int, resamples: int) -> dict[str, str]:
    note = bootstrap.bootstrap_note(n, resamples)
    return {"bootstrap_note": note} if note else {}


def _versions() -> dict:
    import sys

    out = {"python": sys.version.split()[0], "numpy": np.__version__}
    for name in ("onnxruntime", "torch"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "?")
    return out
