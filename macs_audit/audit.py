"""The audit: views x predictor x accumulators -> Report.

`run_audit` is the one function the CLI, the gate, `finetune` and `calibrate` call. It never
prints; progress goes to an optional callback `progress(description, done, total)`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from typing import Callable

import numpy as np

import macs_audit
from macs_audit import distributed
from macs_audit.calibrators.temperature import fit_temperature
from macs_audit.data.batching import device_images, prefetched
from macs_audit.data.sources import Source
from macs_audit.data.splits import stratified_split
from macs_audit.distributed import SINGLE, Context
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import accumulators
from macs_audit.models.predictor import Predictor
from macs_audit.models.preprocessing import to_unit_float
from macs_audit.report import (
    Conventions,
    CorruptionSummary,
    DataInfo,
    MarginHistogram,
    ModelInfo,
    Reliability,
    Report,
    Robustness,
    Runtime,
    TemperatureScaling,
    Tool,
    ViewResult,
)
from macs_audit.views import view as views
from macs_audit.views.corruptions.table import FAMILIES
from macs_audit.views.view import View

ProgressFn = Callable[[str, int, int], None]


@dataclasses.dataclass
class AuditOptions:
    batch_size: int = 500
    calibration_split: float = 0.2  # fraction of the evaluation data held out to fit T; 0 disables
    bootstrap: int = 1000  # bootstrap resamples for the intervals; 0 disables
    seed: int = 0
    # Robustness (all off by default in the library; the CLI turns on the robust view and sensitivity).
    perturbations: tuple[str, ...] = ()  # of perturbations.EVAL_VIEWS
    sensitivity_samples: int = 0  # images (class-stratified) for L^; 0 disables
    sensitivity_directions: int = 8  # finite-difference directions (ONNX models)
    corruptions: tuple[str, ...] = ()  # of corruptions.CORRUPTIONS
    severities: tuple[int, ...] = (1, 2, 3, 4, 5)
    cifar_c_dir: str | None = None  # read released CIFAR-C files instead of generating
    frost_textures: str | None = None
    corruption_baseline: Report | None = None  # for CE / relative mCE
    workers: int | None = None  # ImageFolder decoding processes; None: min(8, cores / processes)


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
    description: str | None = None,
    keep_logits: bool = False,
    ctx: Context = SINGLE,
    workers: int = 0,
):
    """Run one view over the whole source (this rank's shard under torch.distributed, then
    combined across ranks); return (accumulator, logits or None).

    A torch model on CUDA gets the whole split as one device tensor when it fits (views then run
    on the device with no host round trip), else page-locked host batches."""
    acc = accumulators.CalibrationAccumulator(num_classes)
    kept, starts = [], []
    done = 0
    total = (
        len(source)
        if not ctx.active
        else sum(
            min(batch_size, len(source) - st) for b, st in enumerate(range(0, len(source), batch_size)) if ctx.owns(b)
        )
    )
    description = description or view.name
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
        acc.update(logits, labels)
        starts.append(start)
        if keep_logits:
            kept.append(logits)
        done += len(labels)
        if progress:
            progress(description, done, total)
    acc = distributed.reduce_accumulator(acc, starts, ctx)
    if keep_logits:
        kept = distributed.gather_in_order(kept, starts, ctx)
    return acc, (np.concatenate(kept) if keep_logits else None)


def view_result(view: View, acc: accumulators.CalibrationAccumulator, bootstrap: int, seed: int) -> ViewResult:
    return ViewResult(
        name=view.name,
        kind=view.kind,
        metrics=acc.compute(),
        intervals=accumulators.bootstrap_intervals(acc, bootstrap, seed) if bootstrap else {},
        reliability=Reliability.from_dict(acc.reliability()),
        corruption=view.corruption,
        severity=view.severity,
        family=FAMILIES[view.corruption] if view.corruption else None,
    )


def check_classes(predictor: Predictor, source: Source) -> int:
    k_model, k_data = predictor.num_classes, source.num_classes
    if k_model is not None and k_model != k_data:
        raise InputError(f"the model has {k_model} classes but the data set has {k_data} ({source.name})")
    return k_data


def temperature_section(
    logits: np.ndarray, labels: np.ndarray, num_classes: int, fraction: float, seed: int
) -> dict | None:
    """Fit T on a stratified held-out part of the evaluation data; compare on the rest."""
    if fraction <= 0:
        return None
    if not 0 < fraction < 1:
        raise UsageError(f"--calibration-split must be in [0, 1), got {fraction}")
    held, rest = stratified_split(labels, fraction, seed)
    if len(held) == 0 or len(rest) == 0:
        return None
    t = fit_temperature(logits[held], labels[held])
    raw = accumulators.calibration_metrics(logits[rest], labels[rest], num_classes)
    scaled = accumulators.calibration_metrics(logits[rest] / t, labels[rest], num_classes)
    return {
        "temperature": t,
        "fit_fraction": fraction,
        "n_fit": int(len(held)),
        "n_eval": int(len(rest)),
        "split": "class-stratified, seeded",
        "seed": seed,
        "raw": {k: raw[k] for k in ("accuracy", "ece", "adaptive_ece", "nll", "brier")},
        "scaled": {k: scaled[k] for k in ("accuracy", "ece", "adaptive_ece", "nll", "brier")},
    }


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
    check_corruption_inputs(options, source)  # a mismatched --cifar-c folder fails before the clean pass
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
    clean = view_result(views.CLEAN, acc, options.bootstrap, options.seed)
    robustness = RobustnessResult()
    if options.perturbations or options.sensitivity_samples or options.corruptions:
        robustness = audit_robustness(predictor, source, num_classes, clean, options, progress, ctx)
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
                "bootstrap_resamples": options.bootstrap,
                **_bootstrap_note(len(source), options.bootstrap),
                **robustness.conventions,
            }
        ),
        seeds={"bootstrap": options.seed, "calibration_split": options.seed, **robustness.seeds},
        clean=clean,
        temperature_scaling=TemperatureScaling.from_dict_or_none(
            temperature_section(logits, source.labels, num_classes, options.calibration_split, options.seed)
        ),
        margin_histogram=MarginHistogram.from_dict(margin_histogram(acc)),
        views=robustness.views,
        robustness=Robustness.from_dict_or_none(robustness.section),
        corruption_summary=CorruptionSummary.from_dict_or_none(robustness.corruption_summary),
        tool=Tool.from_dict({"name": "macs-audit", "version": macs_audit.__version__}),
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    )
    return AuditResult(report=report, logits=logits, labels=source.labels.copy())


def check_corruption_inputs(options: AuditOptions, source: Source | None = None) -> None:
    """Fail before any audit when the corruption grid cannot run: a --cifar-c folder that lacks a requested
    corruption or (given the clean `source`) was made from other data, or an unusable frost texture folder."""
    if not options.corruptions:
        return
    if options.cifar_c_dir:
        from macs_audit.data.released import check_cifar_c

        check_cifar_c(options.cifar_c_dir, options.corruptions, source)
    elif options.frost_textures:
        from macs_audit.views.corruptions.weather import frost_texture_info  # imports torch, as the grid does

        frost_texture_info(options.frost_textures)


def _bootstrap_note(n: int, resamples: int) -> dict[str, str]:
    note = accumulators.bootstrap_note(n, resamples)
    return {"bootstrap_note": note} if note else {}


def audit_robustness(
    predictor: Predictor,
    source: Source,
    num_classes: int,
    clean: ViewResult,
    options: AuditOptions,
    progress: ProgressFn | None,
    ctx: Context = SINGLE,
) -> RobustnessResult:
    """Perturbation views, sensitivity and the corruption grid."""
    from macs_audit.data.splits import stratified_subset

    device = views.view_device(predictor.device)
    result = RobustnessResult()
    section: dict = {}
    if options.perturbations:
        from macs_audit.views.perturbation_params import ROBUST_VIEW, describe

        result.conventions["perturbations"] = describe()
        result.seeds["perturbations"] = options.seed
        for name in options.perturbations:
            view = views.perturbation(name, options.seed, device)
            acc, _ = evaluate_view(
                predictor,
                source,
                num_classes,
                options.batch_size,
                view,
                progress,
                name,
                ctx=ctx,
                workers=_workers(options, ctx),
            )
            result.views.append(view_result(view, acc, options.bootstrap, options.seed))
            if name == ROBUST_VIEW:
                section["robust_accuracy"] = result.views[-1].metrics["accuracy"]
                section["robust_view"] = name
    if options.sensitivity_samples:
        from macs_audit.metrics.sensitivity import sensitivity

        pos = stratified_subset(source.labels, options.sensitivity_samples, options.seed)
        images = to_unit_float(source.images(pos))
        if progress:
            progress("sensitivity", 0, len(pos))
        sens = sensitivity(
            predictor,
            images,
            source.labels[pos],
            options.sensitivity_directions,
            options.seed,
            batch_size=min(options.batch_size, 256),
            ctx=ctx,
        )
        if progress:
            progress("sensitivity", len(pos), len(pos))
        section["sensitivity"] = sens
        lipschitz = sens["lipschitz"]
        section["robustness_ratio"] = clean.metrics["mean_margin"] / lipschitz if lipschitz > 0 else None
        section["median_flip_radius"] = sens["median_flip_radius"]
        result.seeds["sensitivity"] = options.seed
    if options.corruptions:
        result.views += corruption_grid(predictor, source, num_classes, options, progress, ctx, device)
        result.corruption_summary = corruption_summary(result.views, clean, options)
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
) -> list[ViewResult]:
    """Every corruption x severity, generated on `device` or read from released files."""
    from macs_audit.data.released import cifar_c_source

    grid = [(c, s) for c in options.corruptions for s in options.severities]
    results = []
    for i, (name, severity) in enumerate(grid):
        if options.cifar_c_dir:
            view_source = cifar_c_source(options.cifar_c_dir, source, name, severity)
            view = views.read_corruption(name, severity)
        else:
            view_source = source
            view = views.corruption(name, severity, options.seed, device, options.frost_textures)

        def grid_progress(desc: str, done: int, total: int, i: int = i) -> None:
            if progress:
                progress(desc, done, total)
                progress("corruption grid", i * total + done, len(grid) * total)

        acc, _ = evaluate_view(
            predictor,
            view_source,
            num_classes,
            options.batch_size,
            view,
            grid_progress,
            f"{name} s{severity}",
            ctx=ctx,
            workers=_workers(options, ctx),
        )
        # No bootstrap per grid cell: 95 cells x 1000 resamples costs more than the grid is worth.
        results.append(view_result(view, acc, 0, options.seed))
    return results


def corruption_summary(view_results: list[ViewResult], clean: ViewResult, options: AuditOptions) -> dict:
    from macs_audit.metrics.corruption_summary import summarize_corruptions

    summary = summarize_corruptions(
        [v for v in view_results if v.kind == "corruption"], clean.metrics["accuracy"], options.corruption_baseline
    )
    summary["source"] = f"read from {options.cifar_c_dir}" if options.cifar_c_dir else "generated by macs-audit"
    if not options.cifar_c_dir and "frost" in options.corruptions:
        from macs_audit.views.corruptions.weather import frost_texture_info  # imports torch

        summary["frost_textures"] = frost_texture_info(options.frost_textures)
    return summary


def _versions() -> dict:
    import sys

    out = {"python": sys.version.split()[0], "numpy": np.__version__}
    for name in ("onnxruntime", "torch"):
        module = sys.modules.get(name)
        if module is not None:
            out[name] = getattr(module, "__version__", "?")
    return out
