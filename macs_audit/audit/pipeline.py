"""`run_audit`, the driver: check the inputs, draw the calibration split, run the clean view, then the
robustness and trust halves and what is fitted on the split, and assemble the Report once, in that order."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

import numpy as np

import macs_audit
from macs_audit.audit.calibration import (
    calibration_split,
    calibrators_section,
    conformal_fit,
    helpful_temperature,
    small_sample_notes,
    temperature_section,
)
from macs_audit.audit.classes import CONVENTION as CLASS_MATCHING
from macs_audit.audit.classes import match_classes, matching_record, restricted
from macs_audit.audit.inference import evaluate_view, view_result
from macs_audit.audit.options import AuditOptions, sized, workers
from macs_audit.audit.parity import ParityRecorder, check_pair
from macs_audit.audit.robustness import RobustnessResult, audit_robustness, check_corruption_data
from macs_audit.audit.shift import audit_shift, real_labels_section, restricted_accumulator
from macs_audit.audit.trust import audit_trust
from macs_audit.data.sources import Source
from macs_audit.distributed import SINGLE, Context
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import accumulators, bootstrap
from macs_audit.metrics.per_class import per_class_stats, prediction_spread
from macs_audit.models.predictor import Predictor
from macs_audit.progress import ProgressFn
from macs_audit.report import Conventions, DataInfo, MarginHistogram, ModelInfo, Report, Runtime, TemperatureFit, Tool
from macs_audit.views import view as views


@dataclasses.dataclass(frozen=True)
class AuditResult:
    report: Report
    logits: np.ndarray  # clean-view logits, float32 (N, K)
    labels: np.ndarray
    target_logits: dict = dataclasses.field(default_factory=dict)  # the --ood-data and --unlabeled logits


def run_audit(
    predictor: Predictor,
    source: Source,
    options: AuditOptions | None = None,
    *,
    progress: ProgressFn | None = None,
    data_info: dict | None = None,
    ctx: Context = SINGLE,
    reference: Predictor | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> AuditResult:
    """Audit `predictor` on `source`. Under torch.distributed (ctx), every rank returns the same Report. With
    `reference`, the report's parity section: the reference scored on the same batches of every view
    (audit/parity.py), in the same pass; what pairing the two models' preprocessing says (a side that takes the
    other's mean, ...) goes to `on_warning` as the audit begins, and into the section's `warnings`."""
    options = sized(options or AuditOptions(), predictor.config)
    if options.batch_size < 1:
        raise UsageError(f"--batch-size must be positive, got {options.batch_size}")
    # The data's classes met the model's outputs by name, index, class map or position (audit/classes.py); the
    # predictor scores them in the data's class order, restricted to them: every view, fit and set below.
    space = match_classes(predictor, source, options.class_map, options.class_map_name)
    full_predictor, predictor = predictor, restricted(predictor, space)
    num_classes = len(space.classes)
    if not space.is_identity and options.real_labels is not None:
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
        if not space.is_identity and options.shift_sets:
            raise UsageError(
                "--reference with --shift-data needs --data whose classes are the model's outputs in order; "
                "run the parity audit without --shift-data"
            )
        paired = check_pair(reference, full_predictor)  # the two models as they are; then each on the data's classes
        if on_warning is not None:
            for line in paired:
                on_warning(line)
        reference = restricted(reference, match_classes(reference, source, options.class_map, options.class_map_name))
        recorder = ParityRecorder(
            reference,
            source.labels,
            num_classes,
            split,
            coverage=options.coverage,
            resamples=options.bootstrap,
            seed=options.seed,
            shift_sets=options.shift_sets,
            restricted_accumulator=restricted_accumulator,
            candidate=predictor,
            warnings=paired,
        )
    acc, logits = evaluate_view(
        predictor,
        source,
        num_classes,
        options.batch_size,
        progress=progress,
        keep_logits=True,
        ctx=ctx,
        workers=workers(options, ctx),
        observer=recorder,
    )
    clean = view_result(views.CLEAN, acc, options.bootstrap, options.seed, progress, observer=recorder)
    sets = conformal_fit(
        logits,
        source.labels,
        split,
        coverage=options.coverage,
        progress=progress,
        conformal_split=options.conformal_split,
        raps=options.raps,
    )
    clean = dataclasses.replace(
        clean,
        per_class=per_class_stats(logits, source.labels, source.class_names, sets),
        # Indexed by the logits' columns: the model's outputs in order (its own class names, else the data's,
        # matched by position then), or the data's classes where the predictor is restricted to them.
        predictions=prediction_spread(
            logits, (space.is_identity and full_predictor.config.class_names) or source.class_names
        ),
    )
    robustness = RobustnessResult()
    if options.perturbations or options.sensitivity_samples or options.corruptions:
        robustness = audit_robustness(
            predictor,
            source,
            num_classes,
            clean,
            options,
            parameters=parameters,
            sets=sets,
            progress=progress,
            ctx=ctx,
            observer=recorder,
        )
    temperature = temperature_section(logits, source.labels, num_classes, split, progress=progress)
    trust = audit_trust(
        predictor,
        logits,
        source.labels,
        num_classes,
        options,
        sets=sets,
        view_results=robustness.views,
        progress=progress,
        ctx=ctx,
        temperature=helpful_temperature(temperature),
    )
    # The shift sets map to the model's own outputs; the clean sets are scored on them where they were fitted there.
    shift, shift_conventions = audit_shift(
        full_predictor,
        options,
        sets=sets if space.is_identity else None,
        progress=progress,
        ctx=ctx,
        observer=recorder,
    )
    real, real_conventions = real_labels_section(
        logits, source.labels, options.real_labels, resamples=options.bootstrap, seed=options.seed
    )
    calibrators = calibrators_section(logits, source.labels, options.calibrators, split, progress=progress)
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
        conventions=Conventions.from_dict(
            {
                **accumulators.CONVENTIONS,
                "bootstrap": bootstrap.CONVENTION,
                "bootstrap_resamples": options.bootstrap,
                **_bootstrap_note(len(source), options.bootstrap),
                **_small_sample(len(source), temperature),
                **robustness.conventions,
                **trust.conventions,
                **shift_conventions,
                **real_conventions,
                **({"class_matching": CLASS_MATCHING} if space.is_subset else {}),
            }
        ),
        seeds={"bootstrap": options.seed, "calibration_split": options.seed, **robustness.seeds, **trust.seeds},
        clean=clean,
        temperature_scaling=temperature,
        calibrators=calibrators,
        margin_histogram=margin_histogram(acc),
        views=robustness.views,
        robustness=robustness.section,
        corruption_summary=robustness.corruption_summary,
        conformal=trust.conformal,
        ood=trust.ood,
        unlabeled=trust.unlabeled,
        shift=shift,
        real_labels=real,
        parity=recorder.section() if recorder is not None else None,
        tool=Tool.of(name="macs-audit", version=macs_audit.__version__),
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    )
    return AuditResult(report=report, logits=logits, labels=source.labels.copy(), target_logits=trust.target_logits)


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
