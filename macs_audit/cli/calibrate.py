"""`macs-audit calibrate MODEL`: a post-hoc calibrator (temperature scaling by default, or the best of several)
fitted on held-out data, folded into a written model, and the before/after audit. The run itself is
macs_audit.calibrate."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from macs_audit.cli.console import handle_errors, note, state, warn, warn_about_model
from macs_audit.cli.options import (
    ARCH_OPTION,
    BATCH_SIZE_OPTION,
    BOOTSTRAP_OPTION,
    CALIBRATION_SPLIT_OPTION,
    CORRUPTIONS_OPTION,
    CROP_PCT_OPTION,
    EVAL_DATA_OPTION,
    EVAL_LIMIT_OPTION,
    FORCE_OPTION,
    INPUT_SIZE_OPTION,
    INTERPOLATION_OPTION,
    MEAN_OPTION,
    MODEL_HELP,
    MODEL_OUTPUT_OPTION,
    NUM_CLASSES_OPTION,
    PERTURBATIONS_OPTION,
    PRECISION_OPTION,
    QUIET_OPTION,
    SENSITIVITY_SAMPLES_OPTION,
    SEVERITIES_OPTION,
    STD_OPTION,
    TRUST_PICKLED_OPTION,
    audit_options,
    model_flags,
)
from macs_audit.cli.output import print_before_after, print_calibrators
from macs_audit.cli.progress import Progress, show_progress


@handle_errors
def calibrate(
    model: Path = typer.Argument(..., help=MODEL_HELP, readable=False),
    data: Path = typer.Option(
        ..., "--data", readable=False, help="Held-out data to fit the calibrator on (not the test set)."
    ),
    method: str = typer.Option(
        "temperature",
        "--method",
        help="temperature, vector, matrix, dirichlet, isotonic, histogram; several (comma-separated) or all: "
        "each fitted on --data less a --holdout part, scored on that part, the best by --select written, "
        "fitted again on all of --data, if it beats the uncalibrated model there.",
    ),
    select: str = typer.Option(
        "nll",
        "--select",
        help="Choose between the methods and the uncalibrated model by nll, ece, smooth_ece, brier or accuracy.",
    ),
    holdout: float = typer.Option(
        0.3, "--holdout", help="The fraction of --data the methods and the uncalibrated model are scored on."
    ),
    out: Path = typer.Option(
        ..., "--out", readable=False, help="Output directory: the calibrated model and the before/after audit."
    ),
    data_format: str = typer.Option("auto", "--data-format", help="auto, npz, cifar or imagefolder."),
    split: str = typer.Option("test", "--split", help="Split of a CIFAR python-batches directory for --data."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Fit on a class-stratified subset of N images."),
    eval_data: Optional[Path] = EVAL_DATA_OPTION,
    eval_limit: Optional[int] = EVAL_LIMIT_OPTION,
    arch: Optional[str] = ARCH_OPTION,
    num_classes: Optional[int] = NUM_CLASSES_OPTION,
    input_size: Optional[str] = INPUT_SIZE_OPTION,
    crop_pct: Optional[float] = CROP_PCT_OPTION,
    interpolation: Optional[str] = INTERPOLATION_OPTION,
    mean: Optional[str] = MEAN_OPTION,
    std: Optional[str] = STD_OPTION,
    output_kind: Optional[str] = MODEL_OUTPUT_OPTION,
    trust_pickled: bool = TRUST_PICKLED_OPTION,
    batch_size: Optional[int] = BATCH_SIZE_OPTION,
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    precision: str = PRECISION_OPTION,
    bootstrap: int = BOOTSTRAP_OPTION,
    calibration_split: float = CALIBRATION_SPLIT_OPTION,
    perturbations: str = PERTURBATIONS_OPTION,
    sensitivity_samples: int = SENSITIVITY_SAMPLES_OPTION,
    corruptions: Optional[str] = CORRUPTIONS_OPTION,
    severities: str = SEVERITIES_OPTION,
    seed: int = typer.Option(0, "--seed", min=0, help="Seed for subsets, splits and bootstrap."),
    quiet: bool = QUIET_OPTION,
    force: bool = FORCE_OPTION,
    force_calibration: bool = typer.Option(
        False,
        "--force-calibration",
        help="Write the calibrated model even when --data looks trained on (the model far more accurate there "
        "than on --eval-data, or a sharpening temperature on a model overconfident there) or no map beats the "
        "uncalibrated model on the --holdout part; refused otherwise.",
    ),
) -> None:
    """Fit a post-hoc calibrator on --data and write MODEL with it folded in, audited before and after."""
    from macs_audit.before_after import Fix, which_fix
    from macs_audit.calibrate import fitted_name, run_calibrate
    from macs_audit.calibrators.selection import check_select, parse_methods
    from macs_audit.data.loading import DataSpec

    methods = parse_methods(method)
    check_select(select)
    flags = model_flags(arch, num_classes, input_size, mean, std, output_kind, crop_pct, interpolation)
    audit = audit_options(
        batch_size,
        calibration_split,
        bootstrap,
        seed,
        perturbations,
        sensitivity_samples,
        corruptions,
        severities,
        precision=precision,
    )
    with Progress(show_progress(quiet)) as progress:
        run = run_calibrate(
            model,
            flags,
            DataSpec(data, data_format, split, limit, seed),
            DataSpec(eval_data, "auto", "test", eval_limit, seed),
            out,
            audit,
            methods=methods,
            select=select,
            holdout=holdout,
            device=device,
            trust_pickled=trust_pickled,
            progress=progress,
            force=force,
            debug=state["debug"],
            force_calibration=force_calibration,
        )
    warn_about_model(run.before.model.warnings)  # e.g. CIFAR-10's mean/std on a model they do not fit
    for message in run.notes:  # the fit data's classes in another order than the outputs: matched by name
        note(message)
    for message in run.fit_warnings:  # fit data lacking classes: before the table that refuses maps for it
        warn(message)
    if run.selection is not None:
        print_calibrators(run.selection.to_dict())
        note(run.selection.reason)
    # Which fix won on the evaluation data, by finetune's rule (before_after.which_fix): under the table, and last.
    won = which_fix([Fix("uncalibrated model", run.before), Fix(fitted_name(run.calibrator), run.after)])
    which = won.describe() if won is not None else None
    print_before_after(run.title, run.comparison, which=which)
    for message in run.warnings:  # also in OUT/calibration.json
        warn(message)
    written = f"{fitted_name(run.calibrator)}; calibrated model written to {run.model}"
    note(written + (f"; which fix: {which}" if which else ""))
