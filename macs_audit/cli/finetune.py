"""`macs-audit finetune MODEL`: fine-tune a PyTorch model with MaCS (or a baseline), export it, and show the
before/after audit. The run itself is macs_audit.finetune.run."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from macs_audit.cli.console import handle_errors, note, state, warn, warn_about_model
from macs_audit.cli.options import (
    ARCH_OPTION,
    BATCH_SIZE_HELP,
    BOOTSTRAP_OPTION,
    CALIBRATION_SPLIT_OPTION,
    CORRUPTIONS_OPTION,
    EVAL_DATA_OPTION,
    EVAL_LIMIT_OPTION,
    FORCE_OPTION,
    INPUT_SIZE_OPTION,
    MEAN_OPTION,
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
    parse_range,
)
from macs_audit.cli.output import print_before_after
from macs_audit.cli.progress import Progress, show_progress
from macs_audit.errors import UsageError
from macs_audit.finetune.options import OBJECTIVES, PRESETS, FinetuneOptions
from macs_audit.text import or_list

DEFAULTS = FinetuneOptions()


@handle_errors
def finetune(
    cli_context: typer.Context,
    model: Path = typer.Argument(
        ...,
        readable=False,
        help="PyTorch model: .safetensors/.pt state dict with --arch (or a sidecar JSON), or TorchScript.",
    ),
    data: Path = typer.Option(
        ...,
        "--data",
        readable=False,
        help="Training data: .npz (x, y), CIFAR python-batches dir (--split train) or ImageFolder dir.",
    ),
    out: Path = typer.Option(
        ..., "--out", readable=False, help="Output directory: weights, ONNX, config, checkpoint, before/after audit."
    ),
    objective: str = typer.Option(DEFAULTS.objective, "--objective", help=f"{or_list(OBJECTIVES)}."),
    preset: str = typer.Option(
        DEFAULTS.preset,
        "--preset",
        help="MaCS preset, a measured point of docs/finetune-experiment.md: calibrated (the defaults: the least "
        "accuracy lost) or robust (more robustness for more accuracy and 3x the steps). "
        + "; ".join(f"{name}: " + ", ".join(f"{k} {v}" for k, v in values.items()) for name, values in PRESETS.items())
        + ". Flags given explicitly override the preset.",
    ),
    epochs: float = typer.Option(
        DEFAULTS.epochs, "--epochs", help="Passes over the training split (fractions allowed)."
    ),
    batch_size: int = typer.Option(DEFAULTS.batch_size, "--batch-size", min=2, help="Training batch size."),
    optimizer: str = typer.Option(DEFAULTS.optimizer, "--optimizer", help="sgd (Nesterov) or adamw."),
    lr: float = typer.Option(DEFAULTS.lr, "--lr", help="Peak learning rate (warm-up, then cosine to 0)."),
    weight_decay: float = typer.Option(
        DEFAULTS.weight_decay, "--weight-decay", help="Weight decay (not applied to biases and norm parameters)."
    ),
    warmup: float = typer.Option(DEFAULTS.warmup, "--warmup", help="Fraction of the steps spent warming up."),
    val_fraction: float = typer.Option(
        DEFAULTS.val_fraction, "--val-fraction", help="Class-stratified validation split held out of --data."
    ),
    augment: bool = typer.Option(DEFAULTS.augment, "--augment/--no-augment", help="Random crop + horizontal flip."),
    delta: float = typer.Option(DEFAULTS.delta, "--delta", help="MaCS target margin Delta."),
    lambda_m: float = typer.Option(DEFAULTS.lambda_m, "--lambda-m", help="MaCS weight of the margin term."),
    lambda_c: float = typer.Option(DEFAULTS.lambda_c, "--lambda-c", help="MaCS weight of the consistency (KL) term."),
    kl_direction: str = typer.Option(
        DEFAULTS.kl_direction, "--kl-direction", help="clean||pert (KL(p || p~)) or pert||clean."
    ),
    stop_grad: str = typer.Option(
        DEFAULTS.stop_grad, "--stop-grad", help="View detached inside the KL term: clean, pert or none."
    ),
    ce_on_perturbed: bool = typer.Option(
        DEFAULTS.ce_on_perturbed,
        "--ce-on-perturbed/--ce-on-clean",
        help="MaCS: the CE term also on the perturbed view (mean of the two), or on the clean view only.",
    ),
    bn_stats: str = typer.Option(
        DEFAULTS.bn_stats,
        "--bn-stats",
        help="MaCS: views whose batch statistics update batch norm's running statistics: clean or both.",
    ),
    blur_range: Optional[str] = typer.Option(
        None,
        "--blur-range",
        help=f"Per-sample blur sigma range of T(x), pixels of a 32 px image, scaled with the image side "
        f"(default {DEFAULTS.blur_range[0]},{DEFAULTS.blur_range[1]}).",
    ),
    noise_range: Optional[str] = typer.Option(
        None,
        "--noise-range",
        help=f"Per-sample noise sigma range of T(x) (default {DEFAULTS.noise_range[0]},{DEFAULTS.noise_range[1]}).",
    ),
    focal_gamma: float = typer.Option(
        DEFAULTS.focal_gamma, "--focal-gamma", help="Focal loss gamma (--objective focal)."
    ),
    smoothing: float = typer.Option(DEFAULTS.smoothing, "--smoothing", help="Label smoothing epsilon."),
    mixup_alpha: float = typer.Option(
        DEFAULTS.mixup_alpha, "--mixup-alpha", help="mixup Beta(alpha, alpha) (--objective mixup)."
    ),
    seed: int = typer.Option(
        DEFAULTS.seed, "--seed", min=0, help="Seed for data order, augmentation, perturbations and mixup."
    ),
    split_seed: int = typer.Option(DEFAULTS.split_seed, "--split-seed", min=0, help="Seed of the validation split."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/checkpoint.pt with the same settings."),
    checkpoint_every: int = typer.Option(
        DEFAULTS.checkpoint_every,
        "--checkpoint-every",
        min=0,
        help="Also write OUT/checkpoint.pt every N optimizer steps, not only at epoch ends (0: epoch ends only); "
        "--resume continues from the last one.",
    ),
    from_scratch: bool = typer.Option(
        False,
        "--from-scratch",
        help="Train MODEL's architecture from a random initialisation (seeded by --seed) with the sample model's "
        "schedule (16 epochs of 256, lr 0.2, 2 warm-up epochs; flags given override it); MODEL's own weights "
        "are audited as the start model.",
    ),
    temperature: bool = typer.Option(
        True,
        "--temperature/--no-temperature",
        help="End calibrated: fold a temperature fitted on the validation split (or --val-data) into the written "
        "model.",
    ),
    val_data: Optional[Path] = typer.Option(
        None,
        "--val-data",
        readable=False,
        help="Held-out images the start model never saw, to fit the temperatures on (same formats as --data); "
        "without it they are fitted on the split held out of --data, honest only if the start model was "
        "trained without that split.",
    ),
    force_temperature: bool = typer.Option(
        False,
        "--force-temperature",
        help="Fold the temperature even when the data it is fitted on looks trained on (the run refuses "
        "otherwise); no 'which fix' table is shown then.",
    ),
    name: str = typer.Option(
        "model", "--name", help="File stem of the outputs (NAME.safetensors, NAME.onnx, NAME.json)."
    ),
    data_format: str = typer.Option("auto", "--data-format", help="auto, npz, cifar or imagefolder."),
    split: str = typer.Option("train", "--split", help="Split of a CIFAR python-batches directory for --data."),
    eval_data: Optional[Path] = EVAL_DATA_OPTION,
    eval_limit: Optional[int] = EVAL_LIMIT_OPTION,
    arch: Optional[str] = ARCH_OPTION,
    num_classes: Optional[int] = NUM_CLASSES_OPTION,
    input_size: Optional[str] = INPUT_SIZE_OPTION,
    mean: Optional[str] = MEAN_OPTION,
    std: Optional[str] = STD_OPTION,
    trust_pickled: bool = TRUST_PICKLED_OPTION,
    precision: str = PRECISION_OPTION,
    device: str = typer.Option(
        "auto", "--device", help="auto, cpu, cuda or cuda:N (bf16 autocast + channels_last on CUDA)."
    ),
    audit_batch_size: Optional[int] = typer.Option(
        None, "--audit-batch-size", min=1, help="The before/after audit's batch size. " + BATCH_SIZE_HELP
    ),
    bootstrap: int = BOOTSTRAP_OPTION,
    calibration_split: float = CALIBRATION_SPLIT_OPTION,
    perturbations: str = PERTURBATIONS_OPTION,
    sensitivity_samples: int = SENSITIVITY_SAMPLES_OPTION,
    corruptions: Optional[str] = CORRUPTIONS_OPTION,
    severities: str = SEVERITIES_OPTION,
    quiet: bool = QUIET_OPTION,
    force: bool = FORCE_OPTION,
) -> None:
    """Fine-tune a PyTorch MODEL with MaCS (or a baseline), export it, and audit it before and after."""
    from macs_audit import distributed
    from macs_audit.before_after import fixes_table, which_fix
    from macs_audit.data.loading import DataSpec
    from macs_audit.finetune.run import run_finetune
    from macs_audit.models.torch import check_torch_precision

    flags = model_flags(arch, num_classes, input_size, mean, std, "logits")
    options = FinetuneOptions(
        objective=objective,
        epochs=epochs,
        batch_size=batch_size,
        optimizer=optimizer,
        lr=lr,
        weight_decay=weight_decay,
        warmup=warmup,
        val_fraction=val_fraction,
        split_seed=split_seed,
        augment=augment,
        seed=seed,
        delta=delta,
        lambda_m=lambda_m,
        lambda_c=lambda_c,
        kl_direction=kl_direction,
        stop_grad=stop_grad,
        ce_on_perturbed=ce_on_perturbed,
        bn_stats=bn_stats,
        blur_range=parse_range(blur_range, "--blur-range", DEFAULTS.blur_range),
        noise_range=parse_range(noise_range, "--noise-range", DEFAULTS.noise_range),
        focal_gamma=focal_gamma,
        smoothing=smoothing,
        mixup_alpha=mixup_alpha,
        checkpoint_every=checkpoint_every,
    )
    # Flags given on the command line win over the preset's values. (Compared by name: typer may
    # bundle its own click, whose ParameterSource is not click's.)
    sources = {name: cli_context.get_parameter_source(name) for name in cli_context.params}
    given = {name for name, source in sources.items() if source is not None and source.name == "COMMANDLINE"}
    if objective == "macs":
        options = options.with_preset(preset, keep=frozenset(given))
    elif "preset" in given:
        raise UsageError(f"--preset sets MaCS hyperparameters; it does not apply to --objective {objective}")
    if from_scratch:
        options = options.with_from_scratch(keep=frozenset(given))
    options.validate()  # a bad value (--epochs inf, --lr 0) fails now; the run checks again with the model's settings
    audit = audit_options(
        audit_batch_size,
        calibration_split,
        bootstrap,
        seed,
        perturbations,
        sensitivity_samples,
        corruptions,
        severities,
        precision=precision,
    )
    ctx = distributed.init_from_env(device)  # torchrun: DistributedDataParallel, sharded audits
    check_torch_precision(precision, distributed.rank_device(ctx, device))  # now, not after the training
    with Progress(show_progress(quiet) and ctx.is_main) as progress:
        run = run_finetune(
            model,
            flags,
            DataSpec(data, data_format, split, None, seed),
            DataSpec(eval_data, "auto", "test", eval_limit, seed),
            out,
            options,
            audit,
            name=name,
            device=distributed.rank_device(ctx, device),
            trust_pickled=trust_pickled,
            resume=resume,
            progress=progress,
            ctx=ctx,
            debug=state["debug"],
            force=force,
            temperature=temperature,
            val_data=DataSpec(val_data, data_format, split, None, seed) if val_data is not None else None,
            force_temperature=force_temperature,
        )
    distributed.shutdown(ctx)
    if run.comparison is None:  # not rank 0: rank 0 prints
        return
    if run.onnx_skipped:
        warn(f"{run.onnx_skipped}; use {run.weights.name}")
    warn_about_model(run.before.model.warnings)  # e.g. CIFAR-10's mean/std on a model they do not fit
    for message in run.notes:  # the training data's classes in another order than the outputs: matched by name
        note(message)
    for message in run.warnings:  # a temperature folded on data that looks trained on
        warn(message)
    won = which_fix(run.fixes) if run.fixes else None  # the same words under the table and on the last line
    which = won.describe() if won is not None else None
    print_before_after(run.title, run.comparison, fixes_table(run.fixes) if run.fixes else None, which)
    scaled = f" (temperature T = {run.temperature:.4f} folded in)" if run.temperature is not None else ""
    written = f"fine-tuned model written to {run.weights}" + (f" and {run.onnx}" if run.onnx else "") + scaled
    note(written + (f"; which fix: {which}" if which else ""))
