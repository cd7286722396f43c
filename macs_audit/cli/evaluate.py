"""`macs-audit evaluate MODEL`: audit a model's calibration and robustness, optionally gate the report."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, List, Optional

import typer

from macs_audit.cli.console import handle_errors, note, state, stderr, stdout, warn, warn_about_model
from macs_audit.cli.options import (
    ARCH_OPTION,
    BATCH_SIZE_OPTION,
    CLASS_MAP_OPTION,
    CLASS_PROMPTS_OPTION,
    CONFORMAL_SPLIT_OPTION,
    CORRUPTION_SET_OPTION,
    COVERAGE_OPTION,
    CROP_PCT_OPTION,
    INPUT_SIZE_OPTION,
    INTERPOLATION_OPTION,
    MEAN_OPTION,
    MODEL_HELP,
    MODEL_OUTPUT_OPTION,
    NUM_CLASSES_OPTION,
    OOD_DATA_OPTION,
    PRECISION_OPTION,
    PROVIDER_OPTION,
    QUIET_OPTION,
    RAPS_OPTION,
    REAL_LABELS_FILE_OPTION,
    REAL_LABELS_OPTION,
    REFERENCE_CONFIG_OPTION,
    REFERENCE_OPTION,
    REFERENCE_PROVIDER_OPTION,
    SHIFT_DATA_OPTION,
    SKIP_DAMAGED_SHARDS_OPTION,
    STD_OPTION,
    TRUST_PICKLED_OPTION,
    UNLABELED_OPTION,
    audit_options,
    model_flags,
    parse_corruption_set,
    parse_shift_data,
)
from macs_audit.cli.output import emit, render_report, report_targets
from macs_audit.cli.progress import Progress, show_progress
from macs_audit.cli.report_options import REPORT_FORMAT_OPTION, REPORT_OUTPUT_OPTION
from macs_audit.formats.summary import BARS
from macs_audit.progress import Stage, step

REPORT_STAGE = Stage("report", "")


def save_predictions(path: Path, logits, labels, target_logits: dict | None = None) -> None:
    """logits and labels of the evaluation data, and `ood_logits` / `unlabeled_logits` of --ood-data and
    --unlabeled where they ran, so that their sections can be recomputed from the file."""
    import numpy as np

    from macs_audit.atomic import atomic_path

    extra = {f"{purpose}_logits": values for purpose, values in (target_logits or {}).items()}
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, logits=logits, labels=labels, **extra)


@handle_errors
def evaluate(
    model: Path = typer.Argument(..., help=MODEL_HELP, readable=False),
    data: Optional[Path] = typer.Option(
        None,
        "--data",
        readable=False,
        help="Data: .npz (x, y), CIFAR python-batches dir, ImageFolder dir, or WebDataset shards "
        "(shards-{000000..000099}.tar: images and .cls labels). Default: built-in CIFAR-10 test set.",
    ),
    data_format: str = typer.Option("auto", "--data-format", help="auto, builtin, npz, cifar, imagefolder or shards."),
    split: str = typer.Option("test", "--split", help="Split of a CIFAR python-batches directory: test or train."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Evaluate a class-stratified subset of N images."),
    skip_damaged_shards: bool = SKIP_DAMAGED_SHARDS_OPTION,
    arch: Optional[str] = ARCH_OPTION,
    num_classes: Optional[int] = NUM_CLASSES_OPTION,
    input_size: Optional[str] = INPUT_SIZE_OPTION,
    crop_pct: Optional[float] = CROP_PCT_OPTION,
    interpolation: Optional[str] = INTERPOLATION_OPTION,
    mean: Optional[str] = MEAN_OPTION,
    std: Optional[str] = STD_OPTION,
    output_kind: Optional[str] = MODEL_OUTPUT_OPTION,
    trust_pickled: bool = TRUST_PICKLED_OPTION,
    class_prompts: Optional[Path] = CLASS_PROMPTS_OPTION,
    precision: str = PRECISION_OPTION,
    batch_size: Optional[int] = BATCH_SIZE_OPTION,
    workers: Optional[int] = typer.Option(
        None,
        "--workers",
        min=0,
        help="Processes decoding ImageFolder images (default: min(8, cores per process); 0: in the main process).",
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    calibration_split: float = typer.Option(
        0.2, "--calibration-split", help="Fraction of the data held out to fit the temperature (0 disables)."
    ),
    calibrators: str = typer.Option(
        "all",
        "--calibrators",
        help="Post-hoc calibrators fitted on the temperature's held-out part and scored on the rest, for "
        "information: all, none, or names (temperature, vector, matrix, dirichlet, isotonic, histogram).",
    ),
    bootstrap: int = typer.Option(
        1000, "--bootstrap", min=0, help="Bootstrap resamples for 95% intervals (0 disables)."
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed for subsets, splits and bootstrap."),
    perturbations: str = typer.Option(
        "noise+blur",
        "--perturbations",
        help="Perturbation views: noise, blur, noise+blur (comma-separated), all, or none. noise+blur gives the "
        "robust accuracy.",
    ),
    sensitivity_samples: int = typer.Option(
        500, "--sensitivity-samples", min=0, help="Images (class-stratified) for the input sensitivity L^ (0 disables)."
    ),
    sensitivity_directions: int = typer.Option(
        8, "--sensitivity-directions", min=1, help="Random directions of the finite-difference estimate (ONNX models)."
    ),
    corruptions: Optional[str] = typer.Option(
        None,
        "--corruptions",
        help="CIFAR-C grid: all (the 19; alias cifar-c), benchmark (the 15), or names, comma-separated.",
    ),
    severities: str = typer.Option("1-5", "--severities", help="Corruption severities, e.g. 1-5 or 3 or 1,3,5."),
    corrupted_data: Optional[Path] = typer.Option(
        None,
        "--corrupted-data",
        "--cifar-c",
        readable=False,
        help="Read released corruptions instead of generating them: a CIFAR-10-C/100-C directory (<corruption>.npy, "
        "labels.npy) or an ImageNet-C / Tiny-ImageNet-C tree (<corruption>/<severity>/<class>/<image>).",
    ),
    frost_textures: Optional[Path] = typer.Option(
        None,
        "--frost-textures",
        readable=False,
        help="Directory of frost images (default: built-in procedural textures).",
    ),
    corruption_set: str = CORRUPTION_SET_OPTION,
    corruption_baseline: Optional[Path] = typer.Option(
        None,
        "--corruption-baseline",
        readable=False,
        help="A baseline report with the same corruptions, for CE and relative mCE.",
    ),
    coverage: float = COVERAGE_OPTION,
    conformal_split: Optional[float] = CONFORMAL_SPLIT_OPTION,
    raps: Optional[str] = RAPS_OPTION,
    ood_data: Optional[Path] = OOD_DATA_OPTION,
    unlabeled: Optional[Path] = UNLABELED_OPTION,
    reference: Optional[Path] = REFERENCE_OPTION,
    reference_config: Optional[Path] = REFERENCE_CONFIG_OPTION,
    provider: Optional[str] = PROVIDER_OPTION,
    reference_provider: Optional[str] = REFERENCE_PROVIDER_OPTION,
    shift_data: Optional[list[str]] = SHIFT_DATA_OPTION,
    class_map: Optional[Path] = CLASS_MAP_OPTION,
    real_labels: bool = REAL_LABELS_OPTION,
    real_labels_file: Optional[Path] = REAL_LABELS_FILE_OPTION,
    outputs: Optional[List[Path]] = REPORT_OUTPUT_OPTION,
    formats: Optional[List[str]] = REPORT_FORMAT_OPTION,
    predictions: Optional[Path] = typer.Option(
        None, "--save-predictions", readable=False, help="Write logits and labels (.npz) here."
    ),
    gate: bool = typer.Option(
        False, "--gate", help="Gate the report on thresholds after the audit (exit 1 if a check fails)."
    ),
    config: Optional[Path] = typer.Option(
        None,
        "--config",
        readable=False,
        help="Gate thresholds: a macs-audit.toml (default: [tool.macs-audit.gate] in ./pyproject.toml).",
    ),
    baseline: Optional[Path] = typer.Option(
        None, "--baseline", readable=False, help="A baseline report for the gate's regression checks."
    ),
    use_interval: Optional[bool] = typer.Option(
        None,
        "--use-interval/--point-estimate",
        help="Gate on the pessimistic end of the 95% interval instead of the point estimate (default: the "
        "config's use_interval).",
    ),
    problem_bars: Optional[str] = typer.Option(
        None,
        "--problem-bars",
        help="The summary's bars, NAME=VALUE pairs over the built-in ones (fractions): "
        + ", ".join(f"{name}={value:g}" for name, value in BARS.to_dict().items())
        + ". Recorded in the report; a gate's thresholds are its own.",
    ),
    quiet: bool = QUIET_OPTION,
) -> None:
    """Audit MODEL's calibration and robustness: accuracy, ECE, NLL, Brier, margins with bootstrap
    intervals; temperature scaling; robust accuracy and input sensitivity; the CIFAR-C grid; selective
    prediction and conformal sets; with --ood-data, OOD detection; with --unlabeled, accuracy without labels."""
    from macs_audit import distributed
    from macs_audit.atomic import destination
    from macs_audit.audit import check_corruption_files, run_audit
    from macs_audit.audit.calibration import check_conformal_split, parse_raps
    from macs_audit.audit.classes import match_classes
    from macs_audit.calibrators.selection import parse_methods
    from macs_audit.data.label_space import check_class_map_used, load_mapped_sets, read_class_map
    from macs_audit.data.loading import DataSpec, load_model_data
    from macs_audit.data.real_labels import load_real_labels
    from macs_audit.errors import UsageError
    from macs_audit.formats import terminal
    from macs_audit.formats.summary import parse_bars, record_bars
    from macs_audit.inputs import run_inputs
    from macs_audit.metrics.conformal import check_coverage
    from macs_audit.models.config import read_reference_config
    from macs_audit.models.predictor import check_prompts_read, load_predictor
    from macs_audit.outputs import check_distinct, check_file
    from macs_audit.report import load_report

    # Everything that can be checked without the model is checked first: options, gate config, outputs.
    if corrupted_data and not corruptions:
        raise UsageError("--corrupted-data / --cifar-c needs --corruptions (e.g. --corruptions all)")
    if frost_textures and not corruptions:
        raise UsageError("--frost-textures needs --corruptions (e.g. --corruptions frost)")
    options = audit_options(
        batch_size,
        calibration_split,
        bootstrap,
        seed,
        perturbations,
        sensitivity_samples,
        corruptions,
        severities,
        workers=workers,
        calibrators=() if calibrators.strip() == "none" else tuple(parse_methods(calibrators)),
        sensitivity_directions=sensitivity_directions,
        released_dir=str(corrupted_data) if corrupted_data else None,
        frost_textures=str(frost_textures) if frost_textures else None,
        corruption_set=parse_corruption_set(corruption_set),
        corruption_baseline=load_report(corruption_baseline) if corruption_baseline else None,
        coverage=check_coverage(coverage),
        conformal_split=check_conformal_split(conformal_split),
        raps=parse_raps(raps),
    )
    shift_sets = parse_shift_data(shift_data)
    mapping = read_class_map(class_map) if class_map is not None else None  # a bad file fails before the model
    configured_gate = None
    gate_inputs: tuple[Path | None, ...] = ()
    if gate or config or baseline:
        from macs_audit.gate import ConfiguredGate

        configured_gate = ConfiguredGate.load(config, baseline)  # a bad config fails now, not after the audit
        gate_inputs = configured_gate.inputs
    if reference is not None:
        from macs_audit.audit.parity import same_file

        if same_file(reference, model):
            raise UsageError(f"--reference {reference} is MODEL itself; give the model MODEL was built from")
    if reference_config is not None and reference is None:
        raise UsageError("--reference-config gives the --reference model's settings; give --reference MODEL too")
    reference_settings = read_reference_config(reference_config) if reference_config is not None else {}
    inputs = run_inputs(  # every file the run reads: no output may replace one, --force or not
        models=[(model, arch), (reference, arch)],
        data=[data, *(path for path in (ood_data, unlabeled) if path is not None), *(f for _, f in shift_sets)],
        files=[
            corruption_baseline,
            corrupted_data,
            frost_textures,
            class_prompts,
            class_map,
            real_labels_file,
            reference_config,
        ],
    ) + tuple(gate_inputs)
    bars = parse_bars(problem_bars) if problem_bars is not None else None
    targets = report_targets(formats, outputs, inputs)  # a bad --format fails before the model loads
    check_distinct([*(("--output", path) for path in outputs or []), ("--save-predictions", predictions)])
    if predictions is not None:
        check_file(predictions, inputs=inputs, option="--save-predictions")
    # A format on standard output keeps it for that document: the tables go to stderr. Its terminal
    # format is the tables themselves.
    report_to_stdout = any(path is None and name != "terminal" for name, path in targets)
    brief = quiet and bool(outputs)  # --quiet with the report going to --output: the verdict line alone
    targets = [(name, path) for name, path in targets if path is not None or name != "terminal"]
    if report_to_stdout and predictions is not None and destination(predictions).fd == 1:
        raise UsageError("--output and --save-predictions cannot both go to standard output")
    check_corruption_files(options)  # the --corrupted-data folder and frost textures, before the model loads

    ctx = distributed.init_from_env(device)  # torchrun: one shard of every view per process
    flags = model_flags(arch, num_classes, input_size, mean, std, output_kind, crop_pct, interpolation)
    predictor = load_predictor(
        model,
        flags,
        device=distributed.rank_device(ctx, device),
        allow_unsafe_pickle=trust_pickled,
        debug=state["debug"],
        precision=precision,
        class_prompts=class_prompts,
        provider=provider,
    )
    reference_predictor = None
    if reference is not None:  # on the same --device
        from macs_audit.audit.parity import check_pair, load_reference

        # The same class prompts (a zero-shot head needs them on either side); --precision is the candidate's
        # alone, the reference at full precision: an fp16 or bf16 run against fp32 is what parity measures.
        reference_predictor = load_reference(
            reference,
            flags,
            reference_settings,
            device=distributed.rank_device(ctx, device),
            allow_unsafe_pickle=trust_pickled,
            debug=state["debug"],
            class_prompts=class_prompts,
            provider=reference_provider,
        )
        # Now, before the data is read by the candidate's pipeline (which may take the reference's settings);
        # run_audit pairs them again, finds them agreed, and warns of what the pairing said (on_warning).
        check_pair(reference_predictor, predictor)
    check_prompts_read(class_prompts, predictor, reference_predictor)
    spec = DataSpec(data, data_format, split, limit, seed, skip_damaged_shards=skip_damaged_shards)
    source, data_info = load_model_data(spec, predictor.config)

    def unlabeled_data(path: Path | None):  # --ood-data and --unlabeled: labels not needed
        if path is None:
            return None
        return load_model_data(DataSpec(path, labeled=False), predictor.config)[0]

    options = dataclasses.replace(
        options,
        ood_source=unlabeled_data(ood_data),
        unlabeled_source=unlabeled_data(unlabeled),
        shift_sets=load_mapped_sets(
            shift_sets,
            predictor.num_classes or source.num_classes,
            image_size=predictor.config.input_size,
            crop_pct=predictor.config.crop_pct,
            interpolation=predictor.config.interpolation,
            crop_offset=predictor.config.crop_offset,
            model_classes=predictor.config.class_names,
            class_map=mapping,
            class_map_name=str(class_map),
        ),
        real_labels=load_real_labels(source, real_labels_file) if real_labels or real_labels_file else None,
        class_map=mapping,
        class_map_name=str(class_map),
    )
    if mapping is not None:  # a map that names no class, then --data matched as run_audit does, then maps no set
        matched = functools.partial(match_classes, predictor, source, mapping, str(class_map))
        check_class_map_used(mapping, str(class_map), source, matched, options.shift_sets)
    with Progress(show_progress(quiet) and ctx.is_main) as progress:
        result = run_audit(
            predictor,
            source,
            options,
            progress=progress,
            data_info=data_info,
            ctx=ctx,
            reference=reference_predictor,
            on_warning=warn if ctx.is_main else None,
        )
        distributed.shutdown(ctx)
        if not ctx.is_main:  # every rank holds the same report; rank 0 alone writes and prints
            return
        finish = step(progress, REPORT_STAGE)  # the outputs written and the tables laid out
        if bars is not None:
            record_bars(result.report, bars)
        if predictions is not None:
            save_predictions(predictions, result.logits, result.labels, result.target_logits)
        # With a report on standard output, the tables go to stderr so that stdout stays that one document.
        console = stderr if report_to_stdout else stdout
        emit(targets, lambda name: render_report(name, result.report, None), console, quiet=True)  # noted below
        tables: Any
        if brief:  # the verdict line alone: the gate's where one runs
            tables = None if configured_gate is not None else terminal.verdict_line(result.report)
        else:
            tables = terminal.renderable(result.report, verdict=configured_gate is None)  # else the gate's ends it
        finish()
    if predictions is not None and not brief:
        note(f"predictions written to {destination(predictions).describe()}")
    for name, path in [] if brief else targets:
        note(f"{name} report written to {destination(path or '-').describe()}")
    warn_about_model(result.report.model.warnings)  # e.g. CIFAR-10's mean/std on a model they do not fit
    summary = result.report.corruption_summary
    if summary is not None and summary.corruption_set and not brief:
        size = "x".join(map(str, summary.image_size or []))
        note(f"corruption parameters: {summary.corruption_set} set on {size} images ({summary.corruption_set_choice})")
    if tables is not None:
        # Lines kept whole (a suggested command, the verdict) are not cut; the verdict alone is one line.
        console.print(tables, crop=False, soft_wrap=brief)
    if configured_gate is not None:
        from macs_audit.cli.output import gate_report

        raise typer.Exit(gate_report(result.report, configured_gate, use_interval, console=console, quiet=brief))
