"""The audit: views x predictor x accumulators -> Report.

`run_audit` is the one function the CLI, the gate, `finetune` and `calibrate` call. It never
prints; progress goes to an optional callback `progress(stage, done, total)` (macs_audit.progress):
every piece of work that can take seconds is a stage of its own, reported when it begins (done 0)
and when it ends, so that each stage's time is its own: a view's passes over the data, each view's
bootstrap intervals, the temperature and calibrator fits, the conformal sets, the OOD and label-free
analyses.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os

import numpy as np

import macs_audit
from macs_audit import distributed
from macs_audit.calibrators.selection import compare_calibrators
from macs_audit.calibrators.temperature import optimal_temperature
from macs_audit.data.batching import device_images, prefetched
from macs_audit.data.sources import Source
from macs_audit.data.splits import stratified_split
from macs_audit.distributed import SINGLE, Context
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import accumulators, bootstrap, conformal, label_free, ood, selective
from macs_audit.metrics.registry import TEMPERATURE_METRICS
from macs_audit.models.predictor import Predictor
from macs_audit.models.preprocessing import to_unit_float
from macs_audit.progress import ProgressFn, Stage, step
from macs_audit.report import (
    Calibrators,
    Conformal,
    Conventions,
    CorruptionSummary,
    DataInfo,
    MarginHistogram,
    ModelInfo,
    OODDetection,
    Reliability,
    Report,
    Robustness,
    Runtime,
    TemperatureFit,
    Tool,
    Unlabeled,
    ViewResult,
)
from macs_audit.views import view as views
from macs_audit.views.corruptions.table import BENCHMARK_CORRUPTIONS, EXTRA_CORRUPTIONS, FAMILIES
from macs_audit.views.view import View


@dataclasses.dataclass
class AuditOptions:
    batch_size: int = 500
    calibration_split: float = 0.2  # fraction of the evaluation data held out to fit T; 0 disables
    calibrators: tuple[str, ...] = ()  # post-hoc methods also fitted on that part and scored on the rest
    bootstrap: int = 1000  # bootstrap resamples for the intervals; 0 disables
    seed: int = 0
    # Robustness (all off by default in the library; the CLI turns on the robust view and sensitivity).
    perturbations: tuple[str, ...] = ()  # of perturbations.EVAL_VIEWS
    sensitivity_samples: int = 0  # images (class-stratified) for L^; 0 disables
    sensitivity_directions: int = 8  # finite-difference directions (ONNX models)
    corruptions: tuple[str, ...] = ()  # of corruptions.CORRUPTIONS
    severities: tuple[int, ...] = (1, 2, 3, 4, 5)
    cifar_c_dir: str | None = None  # read released files (CIFAR-C .npy or an image tree) instead of generating
    frost_textures: str | None = None
    corruption_set: str = "auto"  # cifar, tiny-imagenet, imagenet, or auto: the one nearest the images' size
    corruption_baseline: Report | None = None  # for CE / relative mCE
    workers: int | None = None  # ImageFolder decoding processes; None: min(8, cores / processes)
    coverage: float = conformal.DEFAULT_COVERAGE  # conformal sets' target, fitted on the calibration split
    ood_source: Source | None = None  # a second data set (labels unused) for OOD detection
    unlabeled_source: Source | None = None  # target images whose accuracy is estimated without labels


@dataclasses.dataclass
class AuditResult:
    report: Report
    logits: np.ndarray  # clean-view logits, float32 (N, K)
    labels: np.ndarray


def _workers(options: AuditOptions, ctx: Context) -> int:
    if options.workers is not None:
        return options.workers
    return min(8, max(1, (os.cpu_count() or 1) // ctx.world_size))


def evaluate_view(
    predictor: Predictor,
    source: Source,
    num_classes: int,
    batch_size: int,
    view: View = views.CLEAN,
    progress: ProgressFn | None = None,
    description: str | Stage | None = None,
    keep_logits: bool = False,
    ctx: Context = SINGLE,
    workers: int = 0,
    accumulate: bool = True,
):
    """Run one view over the whole source (this rank's shard under torch.distributed, then
    combined across ranks); return (accumulator, logits or None). `accumulate=False` only predicts
    (an unlabeled source): the accumulator returned is then None.

    A torch model on CUDA gets the whole split as one device tensor when it fits (views then run
    on the device with no host round trip), else page-locked host batches."""
    acc = accumulators.CalibrationAccumulator(num_classes) if accumulate else None
    kept, starts = [], []
    done = 0
    total = (
        len(source)
        if not ctx.active
        else sum(
            min(batch_size, len(source) - st) for b, st in enumerate(range(0, len(source), batch_size)) if ctx.owns(b)
        )
    )
    stage = description if isinstance(description, Stage) else Stage(description or view.name)
    if progress:
        progress(stage, 0, total)  # the stage begins here: its time is its passes and their accumulation
    device = predictor.device
    torch_gpu = device.startswith("cuda") and predictor.backend == "torch"
    resident = device_images(source, device) if torch_gpu else None
    for start, images, labels in prefetched(
        source,
        batch_size,
        view,
        ctx,
        resident,
        torch_gpu and resident is None,
        workers,
        overlap=device.startswith("cuda"),
    ):
        logits = predictor.predict(images)
        if logits.shape[1] != num_classes:
            raise InputError(f"the model outputs {logits.shape[1]} classes but the data has {num_classes}")
        if acc is not None:
            acc.update(logits, labels)
        starts.append(start)
        if keep_logits:
            kept.append(logits)
        done += len(labels)
        if progress:
            progress(stage, done, total)
    if acc is not None:
        acc = acc.reduce(starts, ctx)
    if keep_logits:
        kept = distributed.gather_in_order(kept, starts, ctx)
    return acc, (np.concatenate(kept) if keep_logits else None)


def intervals_stage(view: View) -> Stage:
    return Stage(f"{view.name}: bootstrap intervals", "resamples")


def view_result(
    view: View,
    acc: accumulators.CalibrationAccumulator,
    resamples: int,
    seed: int,
    progress: ProgressFn | None = None,
) -> ViewResult:
    """The view's metrics, selective-prediction metrics and reliability; with `resamples`, its bootstrap
    intervals, a stage of its own (`intervals_stage`)."""
    finish = step(progress if resamples > 0 and acc.count > 1 else None, intervals_stage(view), resamples)
    metrics = acc.compute()
    samples = acc.samples()
    metrics.update(selective.selective_metrics(samples["confidence"], samples["correct"]))
    result = ViewResult(
        name=view.name,
        kind=view.kind,
        metrics=metrics,
        intervals=bootstrap.bootstrap_intervals(acc, resamples, seed, estimates=metrics),
        reliability=Reliability.from_dict(acc.reliability()),
        # Not per grid cell: 95 curves would double the report for a plot nobody draws.
        smooth_reliability=acc.smooth_reliability() if view.kind != "corruption" else None,
        corruption=view.corruption,
        severity=view.severity,
        family=FAMILIES[view.corruption] if view.corruption else None,
    )
    if view.kind == "clean":
        result.risk_coverage = selective.curve_points(selective.risk_curve(samples["confidence"], samples["correct"]))
    finish()
    return result


def check_classes(predictor: Predictor, source: Source) -> int:
    k_model, k_data = predictor.num_classes, source.num_classes
    if k_model is not None and k_model != k_data:
        raise InputError(f"the model has {k_model} classes but the data set has {k_data} ({source.name})")
    return k_data


TEMPERATURE_STAGE = Stage("temperature scaling", "")
CALIBRATORS_STAGE = Stage("post-hoc calibrators", "methods")
CONFORMAL_STAGE = Stage("conformal sets", "")
OOD_STAGE = Stage("OOD detection", "resamples")
LABEL_FREE_STAGE = Stage("label-free estimates", "resamples")


def temperature_section(
    logits: np.ndarray,
    labels: np.ndarray,
    num_classes: int,
    fraction: float,
    seed: int,
    progress: ProgressFn | None = None,
) -> dict | None:
    """Fit T on a stratified held-out part of the evaluation data; compare on the rest."""
    if fraction <= 0:
        return None
    if not 0 < fraction < 1:
        raise UsageError(f"--calibration-split must be in [0, 1), got {fraction}")
    held, rest = stratified_split(labels, fraction, seed)
    if len(held) == 0 or len(rest) == 0:
        return None
    finish = step(progress, TEMPERATURE_STAGE)
    t = optimal_temperature(logits[held], labels[held])
    raw = accumulators.calibration_metrics(logits[rest], labels[rest], num_classes)
    scaled = accumulators.calibration_metrics(logits[rest] / t, labels[rest], num_classes)
    finish()
    return {
        "temperature": t,
        "fit_fraction": fraction,
        "n_fit": int(len(held)),
        "n_eval": int(len(rest)),
        "split": "class-stratified, seeded",
        "seed": seed,
        "raw": {k: raw[k] for k in TEMPERATURE_METRICS},
        "scaled": {k: scaled[k] for k in TEMPERATURE_METRICS},
    }


def calibrators_section(
    logits: np.ndarray,
    labels: np.ndarray,
    methods: tuple[str, ...],
    fraction: float,
    seed: int,
    progress: ProgressFn | None = None,
) -> dict | None:
    """Each of `methods` fitted on the temperature's held-out part and scored on the rest (the same split),
    for information; a method the part is too small for is listed as refused. None when none can be fitted."""
    if not methods or fraction <= 0:
        return None
    held, rest = stratified_split(labels, fraction, seed)
    if len(held) == 0 or len(rest) == 0:
        return None
    finish = step(progress, CALIBRATORS_STAGE, len(methods))
    try:
        selection = compare_calibrators(logits[held], labels[held], logits[rest], labels[rest], methods)
    except UsageError:  # too few held-out images for every method: the table would say nothing
        return None
    finally:
        finish()
    return {**selection.to_dict(), "split": "the temperature's: class-stratified, seeded", "seed": seed}


def margin_histogram(acc: accumulators.CalibrationAccumulator, bins: int = 40) -> dict:
    margins = acc.samples()["margin"]
    lo, hi = float(np.floor(margins.min())), float(np.ceil(margins.max()))
    counts, edges = np.histogram(margins, bins=bins, range=(lo, hi if hi > lo else lo + 1))
    return {"edges": edges.tolist(), "counts": counts.tolist()}


@dataclasses.dataclass
class RobustnessResult:
    """What the robustness half of the audit adds to the Report."""

    views: list[ViewResult] = dataclasses.field(default_factory=list)
    section: dict | None = None  # robust accuracy, sensitivity, robustness ratio
    corruption_summary: dict | None = None
    conventions: dict = dataclasses.field(default_factory=dict)
    seeds: dict = dataclasses.field(default_factory=dict)


def run_audit(
    predictor: Predictor,
    source: Source,
    options: AuditOptions | None = None,
    progress: ProgressFn | None = None,
    data_info: dict | None = None,
    ctx: Context = SINGLE,
) -> AuditResult:
    """Audit `predictor` on `source`. Under torch.distributed (ctx), every rank returns the same Report."""
    options = options or AuditOptions()
    if options.batch_size < 1:
        raise UsageError(f"--batch-size must be positive, got {options.batch_size}")
    num_classes = check_classes(predictor, source)
    check_corruption_inputs(options, source)  # a mismatched --corrupted-data folder fails before the clean pass
    acc, logits = evaluate_view(
        predictor,
        source,
        num_classes,
        options.batch_size,
        progress=progress,
        keep_logits=True,
        ctx=ctx,
        workers=_workers(options, ctx),
    )
    clean = view_result(views.CLEAN, acc, options.bootstrap, options.seed, progress)
    sets = conformal_fit(logits, source.labels, options, progress)
    robustness = RobustnessResult()
    if options.perturbations or options.sensitivity_samples or options.corruptions:
        robustness = audit_robustness(predictor, source, num_classes, clean, options, progress, ctx, sets)
    trust = audit_trust(predictor, logits, source.labels, num_classes, sets, robustness.views, options, progress, ctx)
    temperature = temperature_section(
        logits, source.labels, num_classes, options.calibration_split, options.seed, progress
    )
    calibrators = calibrators_section(
        logits, source.labels, options.calibrators, options.calibration_split, options.seed, progress
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
                **robustness.conventions,
                **trust.conventions,
            }
        ),
        seeds={"bootstrap": options.seed, "calibration_split": options.seed, **robustness.seeds, **trust.seeds},
        clean=clean,
        temperature_scaling=TemperatureFit.from_dict_or_none(temperature),
        calibrators=Calibrators.from_dict_or_none(calibrators),
        margin_histogram=MarginHistogram.from_dict(margin_histogram(acc)),
        views=robustness.views,
        robustness=Robustness.from_dict_or_none(robustness.section),
        corruption_summary=CorruptionSummary.from_dict_or_none(robustness.corruption_summary),
        conformal=Conformal.from_dict_or_none(trust.conformal),
        ood=OODDetection.from_dict_or_none(trust.ood),
        unlabeled=Unlabeled.from_dict_or_none(trust.unlabeled),
        tool=Tool.from_dict({"name": "macs-audit", "version": macs_audit.__version__}),
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    )
    return AuditResult(report=report, logits=logits, labels=source.labels.copy())


def conformal_fit(
    logits: np.ndarray, labels: np.ndarray, options: AuditOptions, progress: ProgressFn | None = None
) -> conformal.SplitConformal | None:
    """Conformal sets fitted on the temperature's held-out part (the same split) and scored on the rest; None
    without a calibration split."""
    if options.calibration_split <= 0:
        return None
    held, rest = stratified_split(labels, options.calibration_split, options.seed)
    if len(held) == 0 or len(rest) == 0:
        return None
    finish = step(progress, CONFORMAL_STAGE)
    sets = conformal.SplitConformal.fit(logits, labels, held, rest, options.coverage)
    finish()
    return sets


@dataclasses.dataclass
class TrustResult:
    """What selective prediction, conformal sets, OOD detection and the unlabeled estimate add to the Report."""

    conformal: dict | None = None
    ood: dict | None = None
    unlabeled: dict | None = None
    conventions: dict = dataclasses.field(default_factory=dict)
    seeds: dict = dataclasses.field(default_factory=dict)


def audit_trust(
    predictor: Predictor,
    logits: np.ndarray,
    labels: np.ndarray,
    num_classes: int,
    sets: conformal.SplitConformal | None,
    view_results: list[ViewResult],
    options: AuditOptions,
    progress: ProgressFn | None,
    ctx: Context = SINGLE,
) -> TrustResult:
    """The conformal section from the clean logits (and the views' coverage); the OOD and unlabeled sources'
    passes. The selective-prediction metrics are in every view's metrics (view_result)."""
    result = TrustResult(conventions={"selective": selective.CONVENTION})
    if sets is not None:
        corrupted = {v.name: v.conformal for v in view_results if v.kind == "corruption" and v.conformal}
        result.conformal = {
            "target_coverage": sets.coverage,
            "n_calibration": len(labels) - len(sets.held_out),
            "n_eval": len(sets.held_out),
            "methods": {
                method: {"threshold": q if np.isfinite(q) else None, **stats}
                for (method, q), stats in zip(sets.thresholds.items(), sets.evaluate(logits).values(), strict=True)
            },
            "split": "the temperature's: class-stratified, seeded",
            "seed": options.seed,
            "corruption_mean": conformal.summarize_views(corrupted) if corrupted else None,
        }
        result.conventions["conformal"] = conformal.CONVENTION
    for purpose, target in (("ood", options.ood_source), ("unlabeled", options.unlabeled_source)):
        if target is None:
            continue
        _, target_logits = evaluate_view(
            predictor,
            target,
            num_classes,
            options.batch_size,
            views.CLEAN,
            progress,
            f"{purpose} data",
            keep_logits=True,
            ctx=ctx,
            workers=_workers(options, ctx),
            accumulate=False,
        )
        about = {"source": target.name, "format": target.format, "bootstrap_resamples": options.bootstrap}
        about["seed"] = options.seed
        finish = step(progress, OOD_STAGE if purpose == "ood" else LABEL_FREE_STAGE, max(1, options.bootstrap))
        if purpose == "ood":
            scores = ood.ood_section(logits, target_logits, options.bootstrap, options.seed)
            finish()
            result.ood = {**about, "n_in": len(logits), "n_out": len(target_logits), "scores": scores}
            result.conventions["ood"] = ood.CONVENTION
        else:
            estimates = label_free.estimates(logits, labels, target_logits, options.bootstrap, options.seed)
            finish()
            accuracy = float((logits.argmax(axis=1) == labels).mean())
            result.unlabeled = {**about, "n": len(target_logits), "source_accuracy": accuracy, "estimates": estimates}
            result.conventions["label_free"] = label_free.CONVENTION
        result.seeds[purpose] = options.seed
    return result


def check_corruption_inputs(options: AuditOptions, source: Source | None = None) -> None:
    """Fail before any audit when the corruption grid cannot run: a --corrupted-data folder that lacks a requested
    corruption or severity, holds an empty folder, or (given the clean `source`) was made from other data or
    names other classes; or an unusable frost texture folder."""
    if not options.corruptions:
        return
    if source is not None:
        corruption_parameters(options, source)  # no set for the images' size: fail before the clean pass
    if options.cifar_c_dir:
        from macs_audit.data.released import check_released

        check_released(options.cifar_c_dir, options.corruptions, options.severities, source)
    elif options.frost_textures:
        from macs_audit.views.corruptions.weather import frost_texture_info  # imports torch, as the grid does

        frost_texture_info(options.frost_textures)


def corruption_parameters(options: AuditOptions, source: Source) -> dict:
    """The corruption parameter set for `source`'s images (views.corruptions.table.choose_parameter_set),
    as the report records it: {corruption_set, corruption_set_choice, image_size}."""
    from macs_audit.views.corruptions.table import choose_parameter_set

    height, width = source.image_size()
    if options.cifar_c_dir:  # files written by any set (`corrupt`); the layout does not record which
        stated = options.corruption_set != "auto"
        return {
            "corruption_set": options.corruption_set if stated else None,
            "corruption_set_choice": "read from files" + (", as --corruption-set states" if stated else ""),
            "image_size": [height, width],
        }
    pset, how = choose_parameter_set(options.corruption_set, height, width)
    return {"corruption_set": pset.name, "corruption_set_choice": how, "image_size": [height, width]}


def _bootstrap_note(n: int, resamples: int) -> dict[str, str]:
    note = bootstrap.bootstrap_note(n, resamples)
    return {"bootstrap_note": note} if note else {}


SENSITIVITY_STAGE = Stage("sensitivity")
GRID_STAGE = Stage("corruption grid")


def audit_robustness(
    predictor: Predictor,
    source: Source,
    num_classes: int,
    clean: ViewResult,
    options: AuditOptions,
    progress: ProgressFn | None,
    ctx: Context = SINGLE,
    sets: conformal.SplitConformal | None = None,
) -> RobustnessResult:
    """Perturbation views, sensitivity and the corruption grid; with `sets`, each view's conformal coverage."""
    from macs_audit.data.splits import stratified_subset

    device = views.view_device(predictor.device)
    result = RobustnessResult()
    section: dict = {}
    if options.perturbations:
        from macs_audit.views.perturbation_params import ROBUST_VIEW, describe

        result.conventions["perturbations"] = describe(*source.image_size())
        result.seeds["perturbations"] = options.seed
        for name in options.perturbations:
            view = views.perturbation(name, options.seed, device)
            acc, logits = evaluate_view(
                predictor,
                source,
                num_classes,
                options.batch_size,
                view,
                progress,
                name,
                keep_logits=sets is not None,
                ctx=ctx,
                workers=_workers(options, ctx),
            )
            result.views.append(view_result(view, acc, options.bootstrap, options.seed, progress))
            result.views[-1].conformal = sets.evaluate(logits) if sets is not None else None
            if name == ROBUST_VIEW:
                section["robust_accuracy"] = result.views[-1].metrics["accuracy"]
                section["robust_view"] = name
    if options.sensitivity_samples:
        from macs_audit.metrics.sensitivity import sensitivity

        pos = stratified_subset(source.labels, options.sensitivity_samples, options.seed)
        finish = step(progress, SENSITIVITY_STAGE, len(pos))
        images = to_unit_float(source.images(pos))
        sens = sensitivity(
            predictor,
            images,
            source.labels[pos],
            options.sensitivity_directions,
            options.seed,
            batch_size=min(options.batch_size, 256),
            ctx=ctx,
        )
        finish()
        section["sensitivity"] = sens
        gradient_norm = sens["lipschitz"]  # L^, the mean gradient norm, under the report's key for it
        # Margin and L^ over the same images (the sensitivity subset), so the ratio mixes no populations.
        section["robustness_ratio"] = sens["mean_margin_subset"] / gradient_norm if gradient_norm > 0 else None
        section["median_flip_radius"] = sens["median_flip_radius"]
        result.conventions["robustness_ratio"] = "mean margin / L^, both over the sensitivity subset"
        result.conventions["flip_radius"] = (
            "median of margin / norm(grad margin) over the correctly classified images (margin > 0) "
            "of the sensitivity subset; their number is sensitivity.flip_radius_samples"
        )
        result.seeds["sensitivity"] = options.seed
    if options.corruptions:
        result.views += corruption_grid(predictor, source, num_classes, options, progress, ctx, device, sets)
        parameters = corruption_parameters(options, source)
        result.corruption_summary = corruption_summary(result.views, clean, options, parameters)
        result.seeds["corruptions"] = options.seed
    result.section = section or None
    return result


def corruption_grid(
    predictor: Predictor,
    source: Source,
    num_classes: int,
    options: AuditOptions,
    progress: ProgressFn | None,
    ctx: Context,
    device: str,
    sets: conformal.SplitConformal | None = None,
) -> list[ViewResult]:
    """Every corruption x severity, generated on `device` or read from released files; with `sets`, each
    view's conformal coverage."""
    from macs_audit.data.released import released_source

    grid = [(c, s) for c in options.corruptions for s in options.severities]
    corruption_set = corruption_parameters(options, source)["corruption_set"]
    results = []
    for i, (name, severity) in enumerate(grid):
        if options.cifar_c_dir:
            view_source = released_source(options.cifar_c_dir, source, name, severity)
            view = views.read_corruption(name, severity)
        else:
            view_source = source
            view = views.corruption(name, severity, options.seed, device, options.frost_textures, corruption_set)

        def grid_progress(desc: str, done: int, total: int, i: int = i) -> None:
            if progress:
                progress(desc, done, total)
                progress(GRID_STAGE, i * total + done, len(grid) * total)

        acc, logits = evaluate_view(
            predictor,
            view_source,
            num_classes,
            options.batch_size,
            view,
            grid_progress,
            f"{name} s{severity}",
            keep_logits=sets is not None,
            ctx=ctx,
            workers=_workers(options, ctx),
        )
        # No bootstrap per grid cell: 95 cells x 1000 resamples costs more than the grid is worth.
        results.append(view_result(view, acc, 0, options.seed))
        results[-1].conformal = sets.evaluate(logits) if sets is not None else None
    return results


def corruption_summary(
    view_results: list[ViewResult], clean: ViewResult, options: AuditOptions, parameters: dict
) -> dict:
    """The grid's summary with the corruption parameters it ran with (`corruption_parameters`)."""
    from macs_audit.metrics.corruption_summary import summarize_corruptions

    grid = [v for v in view_results if v.kind == "corruption"]
    summary = summarize_corruptions(
        grid,
        clean.metrics["accuracy"],
        options.corruption_baseline,
        benchmark=BENCHMARK_CORRUPTIONS,
        extras=EXTRA_CORRUPTIONS,
    )
    if options.corruption_baseline is None and parameters.get("corruption_set") == "imagenet":
        from macs_audit.metrics.corruption_summary import alexnet_errors

        # The benchmark's own normaliser: AlexNet's published errors (a --corruption-baseline replaces them).
        summary.update(alexnet_errors(grid, clean.metrics["accuracy"], BENCHMARK_CORRUPTIONS))
    summary["source"] = f"read from {options.cifar_c_dir}" if options.cifar_c_dir else "generated by macs-audit"
    summary.update(parameters)
    if not options.cifar_c_dir and "frost" in options.corruptions:
        from macs_audit.views.corruptions.weather import frost_texture_info  # imports torch

        summary["frost_textures"] = frost_texture_info(options.frost_textures, parameters["corruption_set"])
    return summary


def _versions() -> dict:
    import sys

    out = {"python": sys.version.split()[0], "numpy": np.__version__}
    for name in ("onnxruntime", "torch"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "?")
    return out
