"""`macs-audit finetune MODEL`: fine-tune a PyTorch model with MaCS (or a baseline), export it, and show the
before/after audit. The options come from the table (settings/table.py) through the flags, the spec's finetune
table and the MaCS presets; the run itself is macs_audit.finetune.run."""

from __future__ import annotations

import dataclasses
from typing import Any

from macs_audit.cli.console import handle_errors, note, state, warn, warn_about_model
from macs_audit.cli.output import log_to_mlflow, print_before_after
from macs_audit.cli.parameters import given_values, takes_options
from macs_audit.cli.progress import Progress, show_progress

# The FinetuneOptions fields the table sets as they are (the ranges are parsed, the rest is the run's).
TRAINING_FIELDS = (
    "objective",
    "preset",
    "epochs",
    "batch_size",
    "optimizer",
    "lr",
    "weight_decay",
    "warmup",
    "val_fraction",
    "split_seed",
    "augment",
    "seed",
    "delta",
    "lambda_m",
    "lambda_c",
    "kl_direction",
    "stop_grad",
    "ce_on_perturbed",
    "bn_stats",
    "focal_gamma",
    "smoothing",
    "mixup_alpha",
    "checkpoint_every",
)


def training_options(resolved: Any) -> Any:
    """The FinetuneOptions of resolved finetune options, checked: the preset's values are the resolution's (under
    the flags and the spec), --from-scratch's schedule goes over the preset's, and a value set by a flag or the
    spec wins over both."""
    from macs_audit.errors import UsageError
    from macs_audit.finetune.options import FinetuneOptions
    from macs_audit.settings.parse import parse_range
    from macs_audit.settings.table import FLAG, SPEC

    defaults = FinetuneOptions()
    if resolved["objective"] != "macs" and resolved.given("preset"):
        raise UsageError(
            f"--preset sets MaCS hyperparameters; it does not apply to --objective {resolved['objective']}"
        )
    options = FinetuneOptions(
        **{name: resolved[name] for name in TRAINING_FIELDS},
        blur_range=parse_range(resolved["blur_range"], "--blur-range", defaults.blur_range),
        noise_range=parse_range(resolved["noise_range"], "--noise-range", defaults.noise_range),
    )
    if resolved["from_scratch"]:
        given = frozenset(name for name, source in resolved.sources.items() if source in (FLAG, SPEC))
        options = options.with_from_scratch(keep=given)
    return options.validate()  # a bad value (--epochs inf, --lr 0) fails now; the run checks again with the model's


@handle_errors
@takes_options("finetune")
def finetune(**values: Any) -> None:
    """Fine-tune a PyTorch MODEL with MaCS (or a baseline), export it, and audit it before and after. Options not
    given come from the spec (its finetune table; see --config), then --preset."""
    from macs_audit import distributed
    from macs_audit.auditing import RunContext
    from macs_audit.before_after import (
        BEFORE,
        BEFORE_AFTER_FILES,
        TEMPERATURE_ONLY_FILE,
        ModelLoading,
        fixes_table,
        which_fix,
    )
    from macs_audit.data.loading import DataSpec
    from macs_audit.finetune.run import RUN_CONFIG_FILE, FinetuneData, FinetuneSettings, run_finetune
    from macs_audit.integrations.mlflow import Tracking, TrainingCurve, before_after_record
    from macs_audit.models.torch import check_torch_precision
    from macs_audit.settings.parse import model_flags, parse_audit_options
    from macs_audit.settings.resolve import resolve

    r = resolve("finetune", *given_values(values))
    tracking = Tracking.of(r)  # the mlflow extra, before the training
    flags = model_flags(r["arch"], r["num_classes"], r["input_size"], r["mean"], r["std"], "logits")
    options = training_options(r)
    audit = parse_audit_options(
        r["audit_batch_size"],
        r["calibration_split"],
        r["bootstrap"],
        r["seed"],
        r["perturbations"],
        r["sensitivity_samples"],
        r["corruptions"],
        r["severities"],
        precision=r["precision"],
    )
    ctx = distributed.init_from_env(r["device"])  # torchrun: DistributedDataParallel, sharded audits
    device = distributed.rank_device(ctx, r["device"])
    check_torch_precision(r["precision"], device)  # now, not after the training
    data = DataSpec(r["data"], r["data_format"], r["split"], None, r["seed"])
    val_data = DataSpec(r["val_data"], r["data_format"], r["split"], None, r["seed"]) if r["val_data"] else None
    with Progress(show_progress(r["quiet"]) and ctx.is_main) as progress:
        curve = TrainingCurve(progress) if tracking is not None else None  # each step's loss terms, for MLflow
        run = run_finetune(
            r["model"],
            flags,
            FinetuneData(data, DataSpec(r["eval_data"], "auto", "test", r["eval_limit"], r["seed"]), val_data),
            r["out"],
            options,
            audit,
            FinetuneSettings(
                name=r["name"],
                resume=r["resume"],
                force=r["force"],
                temperature=r["temperature"],
                force_temperature=r["force_temperature"],
                loading=ModelLoading(device, r["trust_pickled"], state["debug"]),
            ),
            context=RunContext(curve or progress, ctx),
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
    compared = {BEFORE: run.before, **({"temperature_only": run.baseline} if run.baseline is not None else {})}
    names = (*BEFORE_AFTER_FILES, *((TEMPERATURE_ONLY_FILE,) if run.baseline is not None else ()), RUN_CONFIG_FILE)
    files = [r["out"] / name for name in names]  # this run's files only: never a stale one left in OUT
    record = before_after_record("finetune", r.values, run, files, which, compared)
    points = curve.points(run.history) if curve is not None else []
    log_to_mlflow(tracking, dataclasses.replace(record, curve=points))
