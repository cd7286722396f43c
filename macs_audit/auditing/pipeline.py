"""`run_audit`, the driver: check the inputs, draw the calibration split, run the clean view and the OOD and
unlabeled sets' passes, make what their logits alone give (`logits_sections`), then the robustness and shift
halves, and assemble the Report once, in that order. The audit of saved logits (auditing/saved.py) runs the same
`logits_sections`, so that its sections are the model audit's bit for bit."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

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
from macs_audit.auditing.features import (
    FeatureTaps,
    default_fit,
    feature_fit,
    features_conventions,
    read_features,
    scored_if_possible,
    with_feature_scores,
)
from macs_audit.auditing.inference import Loop, ViewObserver, evaluate_view, view_result
from macs_audit.auditing.options import DEFAULT_CONTEXT, AuditInputs, AuditOptions, RunContext, sized
from macs_audit.auditing.parity import ParityRecorder, check_pair
from macs_audit.auditing.robustness import (
    RobustnessResult,
    audit_robustness,
    check_corruption_data,
    corruption_summary,
)
from macs_audit.auditing.shift import audit_shift, real_labels_section
from macs_audit.auditing.slicing import SLICES_STAGE, SliceColumns, slice_columns, slices_conventions, slices_section
from macs_audit.auditing.trust import Target, TrustResult, audit_trust, target_logits, with_corruption_mean
from macs_audit.data.sources import Source
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import accumulators, bootstrap, conformal
from macs_audit.metrics.image_properties import PropertyTaps
from macs_audit.metrics.per_class import per_class_stats, prediction_spread
from macs_audit.models.predictor import Predictor
from macs_audit.progress import ProgressFn, step
from macs_audit.report import (
    Calibrators,
    Conventions,
    DataInfo,
    MarginHistogram,
    ModelInfo,
    Report,
    Runtime,
    Slices,
    TemperatureFit,
    Tool,
    ViewResult,
)
from macs_audit.version import __version__
from macs_audit.views import view as views


@dataclasses.dataclass(frozen=True)
class AuditResult:
    report: Report
    logits: np.ndarray  # clean-view logits, float32 (N, K)
    labels: np.ndarray
    target_logits: dict = dataclasses.field(default_factory=dict)  # the --ood-data and --unlabeled logits
    output_names: list[str] | None = None  # the logits' columns' names, where they are not the data's class names
    # The penultimate features the audit read ("clean", "ood", "unlabeled": float32 (N, D)) and the layer they
    # feed (models/features.FeatureHead), for --save-predictions; empty and None without them.
    features: dict = dataclasses.field(default_factory=dict)
    head: Any = None
    columns: SliceColumns | None = None  # what the clean images were sliced by, for --save-predictions


@dataclasses.dataclass(frozen=True)
class CleanPass:
    """The clean view's pass, the model's or saved logits: its accumulator, logits (N, K) and labels (N,), the
    data's class names and the names of the logits' columns (None: by index)."""

    acc: accumulators.CalibrationAccumulator
    logits: np.ndarray
    labels: np.ndarray
    class_names: Sequence[str]
    output_names: Sequence[str] | None
    columns: SliceColumns | None = None  # what the images are sliced by (auditing/slicing.py)


@dataclasses.dataclass(frozen=True)
class LogitsSections:
    """What the audit makes of the clean view's logits and labels alone (`logits_sections`)."""

    clean: ViewResult
    sets: conformal.SplitConformal | None  # fitted on the calibration split: the other views score them too
    temperature: TemperatureFit | None
    calibrators: Calibrators | None
    trust: TrustResult  # its conformal section without the corruption views' mean (trust.with_corruption_mean)
    margin_histogram: MarginHistogram
    slices: Slices | None

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
            "slices": self.slices,
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
    finish = step(progress if clean.columns is not None else None, SLICES_STAGE)
    sliced = slices_section(acc.samples(), logits, sets, clean.columns, options)
    finish()
    return LogitsSections(section, sets, temperature, calibrators, trust, margin_histogram(acc), sliced)


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
    head, features_absent = read_features(predictor, options)  # before the restriction: its inner model gives them
    taps = FeatureTaps(options.seed, strict=options.features == "on") if head is not None else None
    context = dataclasses.replace(context, features=taps)  # every pass of the audit hands them its features
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
    properties = PropertyTaps() if options.image_slices else None
    acc, logits = evaluate_view(
        predictor,
        source,
        num_classes,
        dataclasses.replace(Loop.of_audit(options, context, recorder), properties=properties),
        keep_logits=True,
    )
    assert logits is not None
    columns = slice_columns(source, inputs.metadata, properties.finish(ctx) if properties is not None else None)
    fit = feature_fit(predictor, source, inputs, num_classes, options, context) if taps is not None else None
    # The output names are indexed by the logits' columns: the model's outputs in order (its own class names, else
    # the data's, matched by position then), or the data's classes where the predictor is restricted to them.
    output_names = (space.is_identity and full_predictor.config.class_names) or source.class_names
    sections = logits_sections(
        CleanPass(acc, logits, source.labels, source.class_names, output_names, columns),
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
    ood, unfitted = sections.trust.ood, None
    if taps is not None and ood is not None:
        fit_data, rows = fit or default_fit(taps, logits, source.labels, split)
        scored, out = (taps.kept["clean"][rows], logits[rows]), (taps.kept["ood"], trust.target_logits["ood"])
        ood, unfitted = scored_if_possible(
            ood, taps.strict, lambda: with_feature_scores(ood, head, fit_data, scored, out, options)
        )
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
                **versions(),
            }
        ),
        conventions=conventions_of(
            len(source),
            options,
            sections.temperature,
            robustness.conventions,
            trust.conventions,
            shift_conventions,
            real_conventions,
            {"class_matching": CLASS_MATCHING} if space.is_subset else {},
            features_conventions(head, features_absent, ood, taps, unfitted),
            slices_conventions(sections.slices),
        ),
        seeds={"bootstrap": options.seed, "calibration_split": options.seed, **robustness.seeds, **trust.seeds},
        **{**sections.report_fields(), "ood": ood},
        views=robustness.views,
        robustness=robustness.section,
        corruption_summary=summary,
        conformal=with_corruption_mean(trust.conformal, robustness.views),
        shift=shift,
        real_labels=real,
        parity=recorder.section() if recorder is not None else None,
        representation_shift=taps.section(head) if taps is not None else None,
        tool=Tool.of(name="macs-audit", version=__version__),
        created=now(),
    )
    return AuditResult(
        report=report,
        logits=logits,
        labels=source.labels.copy(),
        target_logits=trust.target_logits,
        output_names=list(output_names) if output_names is not None else None,
        features={k: v for k, v in taps.kept.items() if k != "fit"} if taps is not None else {},
        head=head,
        columns=columns,
    )


def conventions_of(n: int, options: AuditOptions, temperature: TemperatureFit | None, *parts: dict) -> Conventions:
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


def now() -> str:
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


def versions() -> dict:
    import sys

    out = {"python": sys.version.split()[0], "numpy": np.__version__}
    for name in ("onnxruntime", "torch"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "?")
    return out
