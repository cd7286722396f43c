"""The robustness half of the audit: the perturbation views, the input sensitivity and the corruption grid, and
the grid's summary; and the checks of the grid's inputs: its files before the model loads (`check_corruption_files`),
then, against the clean data, the corruption parameter set the grid runs with (`check_corruption_data`)."""

from __future__ import annotations

import dataclasses

from macs_audit.auditing.inference import Loop, ViewObserver, evaluate_view, view_result
from macs_audit.auditing.options import DEFAULT_CONTEXT, AuditOptions, RunContext
from macs_audit.data.sources import Source
from macs_audit.metrics import conformal
from macs_audit.models.predictor import Predictor
from macs_audit.pixels import to_unit_float
from macs_audit.progress import Stage, step
from macs_audit.report import CorruptionSummary, Report, Robustness, Sensitivity, ViewResult
from macs_audit.views import view as views
from macs_audit.views.corruptions.table import BENCHMARK_CORRUPTIONS, EXTRA_CORRUPTIONS, parameter_set

SENSITIVITY_STAGE = Stage("sensitivity")
GRID_STAGE = Stage("corruption grid")


def check_corruption_files(options: AuditOptions) -> None:
    """Fail before the model loads when the corruption grid's files are unusable: a --corrupted-data folder
    that lacks a requested corruption or severity or holds an empty folder, or an unusable frost texture
    folder. What needs the clean data is `check_corruption_data`'s."""
    if not options.corruptions:
        return
    if options.released_dir:
        from macs_audit.data.released import check_released_files

        check_released_files(options.released_dir, options.corruptions, options.severities)
    elif options.frost_textures:
        from macs_audit.views.corruptions.weather import frost_texture_info  # imports torch, as the grid does

        frost_texture_info(options.frost_textures)


def check_corruption_data(options: AuditOptions, source: Source) -> dict | None:
    """Fail before the clean pass when the corruption grid cannot run on `source`: no parameter set for its
    images' size, or a --corrupted-data folder made from other data or naming other classes. Return the
    corruption parameters the grid runs with (`corruption_parameters`); None without a grid. The folder's
    files are checked before the model loads (`check_corruption_files`)."""
    if not options.corruptions:
        return None
    parameters = corruption_parameters(options, source)
    if options.released_dir:
        from macs_audit.data.released import check_released_matches

        check_released_matches(options.released_dir, options.corruptions, options.severities, source)
    return parameters


def corruption_parameters(options: AuditOptions, source: Source) -> dict:
    """The corruption parameter set for `source`'s images (views.corruptions.table.choose_parameter_set),
    as the report records it: {corruption_set, corruption_set_choice, image_size}."""
    from macs_audit.views.corruptions.table import choose_parameter_set

    height, width = source.image_size()
    if options.released_dir:  # files written by any set (`corrupt`); the layout does not record which
        stated = options.corruption_set != "auto"
        return {
            "corruption_set": options.corruption_set if stated else None,
            "corruption_set_choice": "read from files" + (", as --corruption-set states" if stated else ""),
            "image_size": [height, width],
        }
    pset, how = choose_parameter_set(options.corruption_set, height, width)
    return {"corruption_set": pset.name, "corruption_set_choice": how, "image_size": [height, width]}


@dataclasses.dataclass(frozen=True)
class RobustnessResult:
    """What the robustness half of the audit adds to the Report, but the grid's summary (`corruption_summary`)."""

    views: list[ViewResult] = dataclasses.field(default_factory=list)
    section: Robustness | None = None  # robust accuracy, sensitivity, robustness ratio
    conventions: dict = dataclasses.field(default_factory=dict)
    seeds: dict = dataclasses.field(default_factory=dict)


def audit_robustness(
    predictor: Predictor,
    source: Source,
    num_classes: int,
    options: AuditOptions,
    *,
    parameters: dict | None,
    sets: conformal.SplitConformal | None = None,
    context: RunContext = DEFAULT_CONTEXT,
    observer: ViewObserver | None = None,
) -> RobustnessResult:
    """Perturbation views, sensitivity and the corruption grid (run with `parameters`, from
    `check_corruption_data`); with `sets`, each view's conformal coverage; `observer` sees every view's batches."""
    loop = Loop.of_audit(options, context, observer)
    view_results: list[ViewResult] = []
    section: dict = {}
    conventions: dict = {}
    seeds: dict = {}
    if options.perturbations:
        from macs_audit.views.perturbation_params import ROBUST_VIEW, describe

        conventions["perturbations"] = describe(*source.image_size())
        seeds["perturbations"] = options.seed
        view_results += perturbation_views(predictor, source, num_classes, options, sets=sets, loop=loop)
        for robust in (v for v in view_results if v.name == ROBUST_VIEW):
            section["robust_accuracy"] = robust.metrics["accuracy"]
            section["robust_view"] = robust.name
    if options.sensitivity_samples:
        section.update(input_sensitivity(predictor, source, options, context))
        conventions["robustness_ratio"] = "mean margin / L^, both over the sensitivity subset"
        conventions["flip_radius"] = (
            "median of margin / norm(grad margin) over the correctly classified images (margin > 0) "
            "of the sensitivity subset; their number is sensitivity.flip_radius_samples"
        )
        seeds["sensitivity"] = options.seed
    if options.corruptions:
        assert parameters is not None, "the corruption grid runs with the parameters check_corruption_data gives"
        view_results += corruption_grid(
            predictor, source, num_classes, options, parameters=parameters, sets=sets, loop=loop
        )
        seeds["corruptions"] = options.seed
    return RobustnessResult(
        views=view_results,
        section=Robustness.of(**section) if section else None,
        conventions=conventions,
        seeds=seeds,
    )


def perturbation_views(
    predictor: Predictor,
    source: Source,
    num_classes: int,
    options: AuditOptions,
    *,
    sets: conformal.SplitConformal | None,
    loop: Loop,
) -> list[ViewResult]:
    """The perturbation views' sections, each with its conformal coverage under `sets`."""
    device = views.view_device(predictor.device)
    results = []
    for name in options.perturbations:
        view = views.perturbation(name, options.seed, device)
        acc, logits = evaluate_view(
            predictor, source, num_classes, loop, view=view, description=name, keep_logits=sets is not None
        )
        coverage = None
        if sets is not None:  # randomised APS, RAPS and the per-class sets on every image: a stage of its own
            finish = step(loop.progress, Stage(f"{name}: conformal sets", ""))
            coverage = sets.evaluate(logits)
            finish()
        results.append(
            view_result(
                view, acc, options.bootstrap, options.seed, loop.progress, conformal=coverage, observer=loop.observer
            )
        )
    return results


def input_sensitivity(predictor: Predictor, source: Source, options: AuditOptions, context: RunContext) -> dict:
    """The robustness section's sensitivity entries: L^ and the flip radius over a class-stratified subset, and
    the robustness ratio over the same images."""
    from macs_audit.data.splits import stratified_subset
    from macs_audit.metrics.sensitivity import sensitivity

    pos = stratified_subset(source.labels, options.sensitivity_samples, options.seed)
    finish = step(context.progress, SENSITIVITY_STAGE, len(pos))
    images = to_unit_float(source.images(pos))
    sens = sensitivity(
        predictor,
        images,
        source.labels[pos],
        options.sensitivity_directions,
        options.seed,
        batch_size=min(options.batch_size, 256),
        ctx=context.ctx,
    )
    finish()
    gradient_norm = sens["lipschitz"]  # L^, the mean gradient norm, under the report's key for it
    return {
        "sensitivity": Sensitivity.from_dict(sens, "robustness.sensitivity"),  # the metric's own keys
        # Margin and L^ over the same images (the sensitivity subset), so the ratio mixes no populations.
        "robustness_ratio": sens["mean_margin_subset"] / gradient_norm if gradient_norm > 0 else None,
        "median_flip_radius": sens["median_flip_radius"],
    }


def corruption_grid(
    predictor: Predictor,
    source: Source,
    num_classes: int,
    options: AuditOptions,
    *,
    parameters: dict,
    sets: conformal.SplitConformal | None = None,
    loop: Loop,
) -> list[ViewResult]:
    """Every corruption x severity, generated on the predictor's device with `parameters`' set or read from
    released files; with `sets`, each view's conformal coverage."""
    from macs_audit.data.released import released_source

    device = views.view_device(predictor.device)
    grid = [(c, s) for c in options.corruptions for s in options.severities]
    progress = loop.progress
    results = []
    for i, (name, severity) in enumerate(grid):
        if options.released_dir:
            view_source = released_source(options.released_dir, source, name, severity)
            view = views.read_corruption(name, severity)
        else:
            view_source = source
            view = views.corruption(
                name, severity, options.seed, device, options.frost_textures, parameters["corruption_set"]
            )

        def grid_progress(desc: Stage | str, done: int, total: int, terms: dict | None = None, /, i: int = i) -> None:
            if progress:
                progress(desc, done, total)
                progress(GRID_STAGE, i * total + done, len(grid) * total)

        acc, logits = evaluate_view(
            predictor,
            view_source,
            num_classes,
            dataclasses.replace(loop, progress=grid_progress),
            view=view,
            description=f"{name} s{severity}",
            keep_logits=sets is not None,
        )
        coverage = sets.evaluate(logits) if sets is not None else None
        # No bootstrap per grid cell: 95 cells x 1000 resamples costs more than the grid is worth.
        results.append(view_result(view, acc, 0, options.seed, conformal=coverage, observer=loop.observer))
    return results


def corruption_summary(
    view_results: list[ViewResult],
    clean: ViewResult,
    options: AuditOptions,
    parameters: dict,
    baseline: Report | None = None,
) -> CorruptionSummary:
    """The grid's summary (the metrics' summary with its own keys, read as the section) with the corruption
    parameters it ran with (`corruption_parameters`), its Corruption Errors against `baseline` (a report of the
    same grid, --corruption-baseline) where given, else the benchmark's AlexNet errors where it has them."""
    from macs_audit.metrics.corruption_summary import summarize_corruptions

    grid = [v for v in view_results if v.kind == "corruption"]
    summary = summarize_corruptions(
        grid,
        clean.metrics["accuracy"],
        baseline,
        benchmark=BENCHMARK_CORRUPTIONS,
        extras=EXTRA_CORRUPTIONS,
    )
    pset = parameters.get("corruption_set")
    if baseline is None and pset is not None and parameter_set(pset).alexnet_baseline:
        from macs_audit.metrics.corruption_summary import alexnet_errors

        # The benchmark's own normaliser: AlexNet's published errors (a --corruption-baseline replaces them).
        summary.update(alexnet_errors(grid, clean.metrics["accuracy"], BENCHMARK_CORRUPTIONS))
    summary["source"] = f"read from {options.released_dir}" if options.released_dir else "generated by macs-audit"
    summary.update(parameters)
    if not options.released_dir and "frost" in options.corruptions:
        from macs_audit.views.corruptions.weather import frost_texture_info  # imports torch

        summary["frost_textures"] = frost_texture_info(options.frost_textures, parameters["corruption_set"])
    return CorruptionSummary.from_dict(summary, "corruption_summary")
