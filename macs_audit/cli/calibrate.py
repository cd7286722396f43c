"""`macs-audit calibrate MODEL`: temperature scaling fitted on held-out data, folded into a written model, and
the before/after audit. The run itself is macs_audit.finetune.calibrate."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from macs_audit.cli.console import Progress, handle_errors, show_progress, state, stderr, warn, warn_about_model
from macs_audit.cli.options import (
    ARCH_OPTION,
    BOOTSTRAP_OPTION,
    CALIBRATION_SPLIT_OPTION,
    CORRUPTIONS_OPTION,
    EVAL_DATA_OPTION,
    EVAL_LIMIT_OPTION,
    FORCE_OPTION,
    INPUT_SIZE_OPTION,
    MEAN_OPTION,
    MODEL_HELP,
    MODEL_OUTPUT_OPTION,
    NUM_CLASSES_OPTION,
    PERTURBATIONS_OPTION,
    QUIET_OPTION,
    SENSITIVITY_SAMPLES_OPTION,
    SEVERITIES_OPTION,
    STD_OPTION,
    TRUST_PICKLED_OPTION,
    audit_options,
    model_flags,
)
from macs_audit.cli.output import print_before_after


@handle_errors
def calibrate(
    model: Path = typer.Argument(..., help=MODEL_HELP),
    data: Path = typer.Option(..., "--data", help="Held-out data to fit the temperature on (not the test set)."),
    out: Path = typer.Option(..., "--out", help="Output directory: the calibrated model and the before/after audit."),
    data_format: str = typer.Option("auto", "--data-format", help="auto, npz, cifar or imagefolder."),
    split: str = typer.Option("test", "--split", help="Split of a CIFAR python-batches directory for --data."),
    limit: Optional[int] = typer.Option(None, "--limit", help="Fit on a class-stratified subset of N images."),
    eval_data: Optional[Path] = EVAL_DATA_OPTION,
    eval_limit: Optional[int] = EVAL_LIMIT_OPTION,
    arch: Optional[str] = ARCH_OPTION,
    num_classes: Optional[int] = NUM_CLASSES_OPTION,
    input_size: Optional[str] = INPUT_SIZE_OPTION,
    mean: Optional[str] = MEAN_OPTION,
    std: Optional[str] = STD_OPTION,
    output_kind: Optional[str] = MODEL_OUTPUT_OPTION,
    trust_pickled: bool = TRUST_PICKLED_OPTION,
    batch_size: int = typer.Option(500, "--batch-size", min=1, help="Images per model call."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    bootstrap: int = BOOTSTRAP_OPTION,
    calibration_split: float = CALIBRATION_SPLIT_OPTION,
    perturbations: str = PERTURBATIONS_OPTION,
    sensitivity_samples: int = SENSITIVITY_SAMPLES_OPTION,
    corruptions: Optional[str] = CORRUPTIONS_OPTION,
    severities: str = SEVERITIES_OPTION,
    seed: int = typer.Option(0, "--seed", min=0, help="Seed for subsets, splits and bootstrap."),
    quiet: bool = QUIET_OPTION,
    force: bool = FORCE_OPTION,
) -> None:
    """Fit temperature scaling on --data and write MODEL with the temperature folded in, audited before and after."""
    from macs_audit.data.loading import DataSpec
    from macs_audit.finetune.calibrate import run_calibrate

    flags = model_flags(arch, num_classes, input_size, mean, std, output_kind)
    audit = audit_options(
        batch_size, calibration_split, bootstrap, seed, perturbations, sensitivity_samples, corruptions, severities
    )
    with Progress(show_progress(quiet)) as progress:
        run = run_calibrate(
            model,
            flags,
            DataSpec(data, data_format, split, limit, seed),
            DataSpec(eval_data, "auto", "test", eval_limit, seed),
            out,
            audit,
            device=device,
            trust_pickled=trust_pickled,
            progress=progress,
            force=force,
            debug=state["debug"],
        )
    warn_about_model(run.before.model.warnings)  # e.g. CIFAR-10's mean/std on a model they do not fit
    print_before_after(run.title, run.comparison)
    for message in run.warnings:  # also in OUT/temperature.json
        warn(message)
    stderr.print(f"T = {run.temperature:.4f}; calibrated model written to {run.model}")
