"""`macs-audit finetune`, `calibrate` and `export`: fix a miscalibrated model and prove it with the audit.

Each command loads models through the same loaders as `evaluate`, writes every file atomically,
and runs the same `run_audit` before and after, shown as one table with deltas.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import typer

from macs_audit.cli.common import (
    Progress,
    app,
    handle_errors,
    show_progress,
    stderr,
    stdout,
)
from macs_audit.cli.evaluate import MODEL_HELP, load_data, model_flags
from macs_audit.cli.options import (
    ARCH_OPTION,
    INPUT_SIZE_OPTION,
    MEAN_OPTION,
    MODEL_OUTPUT_OPTION,
    NUM_CLASSES_OPTION,
    STD_OPTION,
    TRUST_PICKLED_OPTION,
    parse_floats,
)
from macs_audit.finetune.options import FinetuneOptions

DEFAULTS = FinetuneOptions()
EVAL_DATA_HELP = "Evaluation data for the before/after audit (same formats as --data). Default: built-in CIFAR-10 test set."
# (metric key, label, percent?) of the before/after table.
COMPARE_ROWS = [
    ("accuracy", "accuracy", True), ("ece", "ECE (15 bins)", True), ("adaptive_ece", "adaptive ECE", True),
    ("classwise_ece", "classwise ECE", True), ("nll", "NLL (nats)", False), ("brier", "Brier", False),
    ("mean_confidence", "mean confidence", True), ("mean_margin", "mean logit margin", False),
]


class TrainProgress(Progress):
    """cli.common.Progress plus the loss terms of the current step; one line per epoch in logs."""

    def __init__(self, enabled: bool = True, quiet: bool = False):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as RichProgress

        self.enabled, self.quiet = enabled, quiet
        self._tasks, self._start = {}, {}
        self._epoch = ""
        self._bar = RichProgress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(), console=stderr, transient=False, disable=not enabled,
        )

    def __call__(self, description: str, done: int, total: int, terms: dict | None = None) -> None:
        if description not in self._tasks:
            self._tasks[description] = self._bar.add_task(description, total=total, rate="")
            self._start[description] = time.perf_counter()
        if terms is None:
            elapsed = max(time.perf_counter() - self._start[description], 1e-9)
            text = f"{done / elapsed:,.0f} img/s"
        else:
            text = "  ".join(f"{k} {v:.4g}" for k, v in terms.items())
        self._bar.update(self._tasks[description], total=total, completed=done, rate=text)
        if description.startswith("epoch"):
            self._epoch = description
        elif description == "validate" and terms and not self.quiet and not self.enabled:
            stderr.print(f"{self._epoch}: {text}", highlight=False)  # logs get one line per epoch


def open_torch_model(model: Path, flags: dict, device: str, trust_pickled: bool):
    """Load a PyTorch model with the evaluate loaders; an ONNX file gets an error naming the checkpoint route."""
    from macs_audit.errors import UsageError
    from macs_audit.models.predictor import ONNX_SUFFIXES, load_predictor

    if model.suffix.lower() in ONNX_SUFFIXES:
        raise UsageError(f"{model} is an ONNX model, which cannot be fine-tuned: fine-tune the PyTorch checkpoint it was "
                         "exported from (.safetensors/.pt with --arch or a sidecar JSON), or fix it with "
                         "`macs-audit calibrate`")
    return load_predictor(model, flags, device=device, allow_unsafe_pickle=trust_pickled)


def audit(path: Path, flags: dict, device: str, source, data_info: dict, options, progress, trust: bool,
          label: str, ctx=None):
    from macs_audit.audit import run_audit
    from macs_audit.distributed import SINGLE
    from macs_audit.models.predictor import load_predictor

    predictor = load_predictor(path, flags, device=device, allow_unsafe_pickle=trust)
    return run_audit(predictor, source, options, progress=lambda d, n, t: progress(f"audit {label}: {d}", n, t),
                     data_info=data_info, ctx=ctx or SINGLE).report


def _perturbation_views(report) -> dict[str, dict]:
    return {v.name: v.metrics for v in report.views if v.kind == "perturbation"}


def comparison_rows(before, after) -> list[tuple[str, str, str, str]]:
    """(label, before, after, delta) strings; deltas of percentages in percentage points."""
    rows = []

    def add(label, b, a, percent):
        if b is None or a is None:
            return
        if percent:
            rows.append((label, f"{100 * b:.2f}%", f"{100 * a:.2f}%", f"{100 * (a - b):+.2f} pp"))
        else:
            rows.append((label, f"{b:.4f}", f"{a:.4f}", f"{a - b:+.4f}"))

    for key, label, percent in COMPARE_ROWS:
        add(label, before.clean.metrics.get(key), after.clean.metrics.get(key), percent)
    vb, va = _perturbation_views(before), _perturbation_views(after)
    for name in vb:
        if name in va:  # the corruption grid is summarised below
            add(f"accuracy, {name}", vb[name].get("accuracy"), va[name].get("accuracy"), True)
            add(f"ECE, {name}", vb[name].get("ece"), va[name].get("ece"), True)
    rb, ra = before.robustness or {}, after.robustness or {}
    add("input sensitivity L^", (rb.get("sensitivity") or {}).get("lipschitz"),
        (ra.get("sensitivity") or {}).get("lipschitz"), False)
    add("robustness ratio (margin / L^)", rb.get("robustness_ratio"), ra.get("robustness_ratio"), False)
    cb, ca = before.corruption_summary or {}, after.corruption_summary or {}
    for key, label in (("mean_accuracy_15", "corruption accuracy (15x5)"), ("mean_accuracy_19", "corruption accuracy (19x5)")):
        add(label, cb.get(key), ca.get(key), True)
    return rows


def comparison_table(before, after, title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for name, justify in (("metric", "left"), ("before", "right"), ("after", "right"), ("delta", "right")):
        table.add_column(name, justify=justify)
    for row in comparison_rows(before, after):
        table.add_row(*row)
    return table


def comparison_markdown(before, after, title: str) -> str:
    lines = [f"# {title}", "", f"Data: {after.data.get('source')} (n={after.clean.metrics['n']:,})", "",
             "| metric | before | after | delta |", "|---|---:|---:|---:|"]
    lines += [f"| {' | '.join(row)} |" for row in comparison_rows(before, after)]
    return "\n".join(lines) + "\n"


def write_audits(out: Path, before, after, title: str) -> None:
    from macs_audit.atomic import write_text

    write_text(out / "audit_before.json", before.to_json())
    write_text(out / "audit_after.json", after.to_json())
    write_text(out / "audit_comparison.md", comparison_markdown(before, after, title))
    stdout.print(comparison_table(before, after, title))


def audit_options(batch_size, calibration_split, bootstrap, seed, perturbations, sensitivity_samples, corruptions,
                  severities):
    """The same AuditOptions as `evaluate`, for the before and the after audit."""
    from macs_audit.audit import AuditOptions
    from macs_audit.cli.options import (
        parse_corruptions,
        parse_perturbations,
        parse_severities,
    )
    from macs_audit.errors import UsageError

    if not 0 <= calibration_split < 1:
        raise UsageError(f"--calibration-split must be in [0, 1), got {calibration_split}")
    return AuditOptions(batch_size=batch_size, calibration_split=calibration_split, bootstrap=bootstrap, seed=seed,
                        perturbations=parse_perturbations(perturbations),
                        sensitivity_samples=sensitivity_samples, corruptions=parse_corruptions(corruptions),
                        severities=parse_severities(severities))


# The before/after audit's options, declared once for finetune and calibrate.
EVAL_DATA_OPTION = typer.Option(None, "--eval-data", help=EVAL_DATA_HELP)
EVAL_LIMIT_OPTION = typer.Option(None, "--eval-limit", help="Audit a class-stratified subset of N images.")
BOOTSTRAP_OPTION = typer.Option(200, "--bootstrap", min=0, help="Bootstrap resamples of the audits (0 disables).")
CALIBRATION_SPLIT_OPTION = typer.Option(0.2, "--calibration-split",
                                        help="Audit: fraction held out to fit a temperature (0 disables).")
PERTURBATIONS_OPTION = typer.Option("noise+blur", "--perturbations", help="Audit perturbation views (noise, blur, "
                                    "noise+blur, all or none); noise+blur gives the robust accuracy.")
SENSITIVITY_SAMPLES_OPTION = typer.Option(500, "--sensitivity-samples", min=0,
                                          help="Audit: images for the input sensitivity L^ (0 disables).")
CORRUPTIONS_OPTION = typer.Option(None, "--corruptions", help="Audit CIFAR-C grid: cifar-c (all 19), benchmark "
                                  "(the 15), or names (default: none).")
SEVERITIES_OPTION = typer.Option("1-5", "--severities", help="Audit: corruption severities, e.g. 1-5 or 3.")
QUIET_OPTION = typer.Option(False, "--quiet", "-q", help="No progress bar.")


def parse_range(text: Optional[str], name: str, default) -> tuple[float, float]:
    from macs_audit.errors import UsageError

    if text is None:
        return tuple(default)
    values = parse_floats(text, name)
    if len(values) != 2:
        raise UsageError(f"{name} must be LO,HI, got {text!r}")
    return values[0], values[1]


@app.command()
@handle_errors
def finetune(
    model: Path = typer.Argument(..., help="PyTorch model: .safetensors/.pt state dict with --arch (or a sidecar JSON), or TorchScript."),
    data: Path = typer.Option(..., "--data", help="Training data: .npz (x, y), CIFAR python-batches dir (--split train) or ImageFolder dir."),
    out: Path = typer.Option(..., "--out", help="Output directory: weights, ONNX, config, checkpoint, before/after audit."),
    objective: str = typer.Option(DEFAULTS.objective, "--objective", help="macs, ce, focal, label-smoothing or mixup."),
    epochs: float = typer.Option(DEFAULTS.epochs, "--epochs", help="Passes over the training split (fractions allowed)."),
    batch_size: int = typer.Option(DEFAULTS.batch_size, "--batch-size", min=2),
    optimizer: str = typer.Option(DEFAULTS.optimizer, "--optimizer", help="sgd (Nesterov) or adamw."),
    lr: float = typer.Option(DEFAULTS.lr, "--lr", help="Peak learning rate (warm-up, then cosine to 0)."),
    weight_decay: float = typer.Option(DEFAULTS.weight_decay, "--weight-decay"),
    warmup: float = typer.Option(DEFAULTS.warmup, "--warmup", help="Fraction of the steps spent warming up."),
    val_fraction: float = typer.Option(DEFAULTS.val_fraction, "--val-fraction", help="Class-stratified validation split held out of --data."),
    augment: bool = typer.Option(DEFAULTS.augment, "--augment/--no-augment", help="Random crop + horizontal flip."),
    delta: float = typer.Option(DEFAULTS.delta, "--delta", help="MaCS target margin Delta."),
    lambda_m: float = typer.Option(DEFAULTS.lambda_m, "--lambda-m", help="MaCS weight of the margin term."),
    lambda_c: float = typer.Option(DEFAULTS.lambda_c, "--lambda-c", help="MaCS weight of the consistency (KL) term."),
    kl_direction: str = typer.Option(DEFAULTS.kl_direction, "--kl-direction", help="clean||pert (KL(p || p~)) or pert||clean."),
    stop_grad: str = typer.Option(DEFAULTS.stop_grad, "--stop-grad", help="View detached inside the KL term: clean, pert or none."),
    blur_range: Optional[str] = typer.Option(None, "--blur-range", help=f"Per-sample blur sigma range of T(x) (default {DEFAULTS.blur_range[0]},{DEFAULTS.blur_range[1]})."),
    noise_range: Optional[str] = typer.Option(None, "--noise-range", help=f"Per-sample noise sigma range of T(x) (default {DEFAULTS.noise_range[0]},{DEFAULTS.noise_range[1]})."),
    focal_gamma: float = typer.Option(DEFAULTS.focal_gamma, "--focal-gamma"),
    smoothing: float = typer.Option(DEFAULTS.smoothing, "--smoothing", help="Label smoothing epsilon."),
    mixup_alpha: float = typer.Option(DEFAULTS.mixup_alpha, "--mixup-alpha"),
    seed: int = typer.Option(DEFAULTS.seed, "--seed", help="Seed for data order, augmentation, perturbations and mixup."),
    split_seed: int = typer.Option(DEFAULTS.split_seed, "--split-seed", help="Seed of the validation split."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/checkpoint.pt with the same settings."),
    name: str = typer.Option("model", "--name", help="File stem of the outputs (NAME.safetensors, NAME.onnx, NAME.json)."),
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
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N (bf16 autocast + channels_last on CUDA)."),
    audit_batch_size: int = typer.Option(500, "--audit-batch-size", min=1),
    bootstrap: int = BOOTSTRAP_OPTION,
    calibration_split: float = CALIBRATION_SPLIT_OPTION,
    perturbations: str = PERTURBATIONS_OPTION,
    sensitivity_samples: int = SENSITIVITY_SAMPLES_OPTION,
    corruptions: Optional[str] = CORRUPTIONS_OPTION,
    severities: str = SEVERITIES_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Fine-tune a PyTorch MODEL with MaCS (or a baseline), export it, and audit it before and after."""
    from macs_audit import distributed
    from macs_audit.atomic import write_text
    from macs_audit.errors import InputError, UsageError
    from macs_audit.finetune.loop import finetune as run_finetune
    from macs_audit.models.export import export_onnx, save_safetensors, write_sidecar

    ctx = distributed.init_from_env(device)  # torchrun: DistributedDataParallel, sharded audits
    device = distributed.rank_device(ctx, device)
    flags = model_flags(arch, num_classes, input_size, mean, std, "logits")
    predictor = open_torch_model(model, flags, device, trust_pickled)
    cfg = predictor.config
    options = FinetuneOptions(
        objective=objective, epochs=epochs, batch_size=batch_size, optimizer=optimizer, lr=lr, weight_decay=weight_decay,
        warmup=warmup, val_fraction=val_fraction, split_seed=split_seed, augment=augment, seed=seed, delta=delta, lambda_m=lambda_m,
        lambda_c=lambda_c, kl_direction=kl_direction, stop_grad=stop_grad,
        blur_range=parse_range(blur_range, "--blur-range", DEFAULTS.blur_range),
        noise_range=parse_range(noise_range, "--noise-range", DEFAULTS.noise_range),
        focal_gamma=focal_gamma, smoothing=smoothing, mixup_alpha=mixup_alpha, input_size=tuple(cfg.input_size),
        mean=tuple(cfg.mean), std=tuple(cfg.std), device=predictor.info["device"],
    ).validate()
    checkpoint = out / "checkpoint.pt"
    if checkpoint.exists() and not resume:
        raise UsageError(f"{out} already holds a fine-tuning checkpoint; pass --resume to continue it or choose another --out")
    train_source, train_info = load_data(data, data_format, split, None, seed, tuple(cfg.input_size))
    if cfg.num_classes is not None and cfg.num_classes != train_source.num_classes:
        raise UsageError(f"the model has {cfg.num_classes} classes but {data} has {train_source.num_classes}")
    eval_source, eval_info = load_data(eval_data, "auto", "test", eval_limit, seed, tuple(cfg.input_size))
    audit_opts = audit_options(audit_batch_size, calibration_split, bootstrap, seed, perturbations, sensitivity_samples,
                               corruptions, severities)
    out.mkdir(parents=True, exist_ok=True)
    distributed.barrier(ctx)  # every rank has checked for an old checkpoint before rank 0 writes one
    started = time.time()
    with TrainProgress(show_progress(quiet) and ctx.is_main, quiet or not ctx.is_main) as progress:
        before = audit(model, flags, device, eval_source, eval_info, audit_opts, progress, trust_pickled, "before", ctx)
        result = run_finetune(predictor.model.train(), train_source, options, progress, checkpoint, resume, ctx)
        trained = result.model.cpu().eval()
        as_safetensors = predictor.info["format"] in ("safetensors", "state-dict")
        weights = out / f"{name}.safetensors" if as_safetensors else out / f"{name}.pt"
        if not ctx.is_main:  # rank 0 writes the outputs; the others join the sharded audit of them
            distributed.barrier(ctx)
            audit(weights, {}, device, eval_source, eval_info, audit_opts, progress, trust_pickled, "after", ctx)
            distributed.shutdown(ctx)
            return
        meta = cfg.as_metadata()
        meta["output"] = "logits"
        if as_safetensors:
            save_safetensors(trained, weights)
        else:  # TorchScript or a pickled module stays in its own format
            import torch

            from macs_audit.atomic import atomic_path

            with atomic_path(weights) as tmp:
                (torch.jit.save if predictor.info["format"] == "torchscript" else torch.save)(trained, str(tmp))
        summary = {"objective": objective, "from": model.name, "from_sha256": predictor.info["sha256"],
                   "steps": result.steps, "final_val": result.history[-1]["val"] if result.history else None}
        write_sidecar(out / f"{name}.json", {**meta, "finetune": summary})
        try:
            export_onnx(trained, out / f"{name}.onnx", meta)
        except InputError as exc:
            if predictor.info["format"] != "torchscript":
                raise
            # torch.export cannot trace TorchScript; the fine-tuned TorchScript file is the deliverable.
            stderr.print(f"[yellow]warning:[/] no ONNX export for a TorchScript model ({str(exc)[:120]}...); "
                         f"use {weights.name}", highlight=False)
        write_text(out / "finetune_config.json", json.dumps({
            "options": options.to_dict(), "model": {**meta, "from": str(model), "from_sha256": predictor.info["sha256"],
                                                    "format": predictor.info["format"]},
            "data": {"source": train_source.name, "n": len(train_source), **train_info}, "split": result.split,
            "eval_data": {"source": eval_source.name, "n": len(eval_source), **eval_info},
            "audit": {"batch_size": audit_batch_size, "bootstrap": bootstrap, "calibration_split": calibration_split,
                      "seed": seed, "perturbations": list(audit_opts.perturbations),
                      "sensitivity_samples": sensitivity_samples, "corruptions": list(audit_opts.corruptions),
                      "severities": list(audit_opts.severities)},
            "steps": result.steps, "resumed_from_epoch": result.resumed_from_epoch, "history": result.history,
            "seconds_this_run": round(time.time() - started, 1),
        }, indent=2) + "\n")
        distributed.barrier(ctx)  # the weights are written before the other ranks read them
        after = audit(weights, {}, device, eval_source, eval_info, audit_opts, progress, trust_pickled, "after", ctx)
    distributed.shutdown(ctx)
    write_audits(out, before, after, f"{objective} fine-tuning of {model.name}: before / after on {eval_source.name}")
    onnx_path = out / f"{name}.onnx"
    stderr.print(f"fine-tuned model written to {weights}" + (f" and {onnx_path}" if onnx_path.exists() else ""))


@app.command()
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
    batch_size: int = typer.Option(500, "--batch-size", min=1),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    bootstrap: int = BOOTSTRAP_OPTION,
    calibration_split: float = CALIBRATION_SPLIT_OPTION,
    perturbations: str = PERTURBATIONS_OPTION,
    sensitivity_samples: int = SENSITIVITY_SAMPLES_OPTION,
    corruptions: Optional[str] = CORRUPTIONS_OPTION,
    severities: str = SEVERITIES_OPTION,
    seed: int = typer.Option(0, "--seed"),
    quiet: bool = QUIET_OPTION,
) -> None:
    """Fit temperature scaling on --data and write MODEL with the temperature folded in, audited before and after."""
    from macs_audit.atomic import write_text
    from macs_audit.audit import check_classes, evaluate_view
    from macs_audit.calibrators.temperature import fit_temperature, temperature_nll
    from macs_audit.models.predictor import load_predictor

    flags = model_flags(arch, num_classes, input_size, mean, std, output_kind)
    predictor = load_predictor(model, flags, device=device, allow_unsafe_pickle=trust_pickled)
    fit_source, fit_info = load_data(data, data_format, split, limit, seed, tuple(predictor.config.input_size))
    eval_source, eval_info = load_data(eval_data, "auto", "test", eval_limit, seed, tuple(predictor.config.input_size))
    audit_opts = audit_options(batch_size, calibration_split, bootstrap, seed, perturbations, sensitivity_samples,
                               corruptions, severities)
    with TrainProgress(show_progress(quiet), quiet) as progress:
        k = check_classes(predictor, fit_source)
        _, logits = evaluate_view(predictor, fit_source, k, batch_size, progress=progress, description="fit", keep_logits=True)
        t = fit_temperature(logits, fit_source.labels)
        out.mkdir(parents=True, exist_ok=True)
        calibrated = write_calibrated(model, predictor, t, out)
        before = audit(model, flags, device, eval_source, eval_info, audit_opts, progress, trust_pickled, "before")
        after = audit(calibrated, {}, device, eval_source, eval_info, audit_opts, progress, trust_pickled, "after")
    write_text(out / "temperature.json", json.dumps({
        "temperature": t, "fit_data": {"source": fit_source.name, "n": len(fit_source), **fit_info},
        "fit_nll_before": temperature_nll(logits, fit_source.labels, 1.0),
        "fit_nll_after": temperature_nll(logits, fit_source.labels, t),
        "model": str(model), "calibrated_model": calibrated.name,
    }, indent=2) + "\n")
    write_audits(out, before, after, f"temperature scaling of {model.name} (T = {t:.4f}): before / after on {eval_source.name}")
    stderr.print(f"T = {t:.4f}; calibrated model written to {calibrated}")


def write_calibrated(model: Path, predictor, temperature: float, out: Path) -> Path:
    """The calibrated model file in OUT, in the input's format family (ONNX stays ONNX)."""
    from macs_audit.models.export import write_sidecar

    meta = predictor.config.as_metadata()
    calibration = {"temperature": temperature, "from": model.name, "from_sha256": predictor.info["sha256"]}
    if predictor.backend == "onnxruntime":
        from macs_audit.models.temperature import fold_temperature_onnx

        path = out / f"{model.stem}.onnx"
        fold_temperature_onnx(model, path, temperature, meta, probabilities=predictor.output.kind == "probabilities")
        return path
    import torch

    from macs_audit.atomic import atomic_path
    from macs_audit.models.export import save_safetensors
    from macs_audit.models.temperature import (
        fold_temperature_torch,
        temperature_wrapper,
    )

    net = predictor.model.cpu().eval()
    fmt = predictor.info["format"]
    if fmt == "torchscript":  # no Python head to edit: script a wrapper that divides
        path = out / f"{model.stem}.pt"
        with atomic_path(path) as tmp:
            torch.jit.save(torch.jit.script(temperature_wrapper(net, temperature)), str(tmp))
        calibration["folded_into"] = "TorchScript wrapper (logits / T)"
    else:
        example = torch.randn(4, len(meta["mean"]), *meta["input_size"], generator=torch.Generator().manual_seed(0))
        scaled, where = fold_temperature_torch(net, temperature, example)
        calibration["folded_into"] = where
        if fmt == "pickled-module":
            path = out / f"{model.stem}.pt"
            with atomic_path(path) as tmp:
                torch.save(scaled, str(tmp))
        else:
            path = out / f"{model.stem}.safetensors"
            save_safetensors(scaled, path)
    write_sidecar(path.with_suffix(".json"), {**meta, "calibration": calibration})
    return path


@app.command()
@handle_errors
def export(
    checkpoint: Path = typer.Argument(..., help="PyTorch checkpoint: .safetensors/.pt state dict (with --arch or a sidecar JSON) or TorchScript."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="ONNX file to write. Default: CHECKPOINT with .onnx."),
    arch: Optional[str] = ARCH_OPTION,
    num_classes: Optional[int] = NUM_CLASSES_OPTION,
    input_size: Optional[str] = INPUT_SIZE_OPTION,
    mean: Optional[str] = MEAN_OPTION,
    std: Optional[str] = STD_OPTION,
    output_kind: Optional[str] = MODEL_OUTPUT_OPTION,
    opset: int = typer.Option(18, "--opset", help="ONNX opset version."),
    trust_pickled: bool = TRUST_PICKLED_OPTION,
) -> None:
    """Export a PyTorch CHECKPOINT to one ONNX file (dynamic batch) with the metadata `evaluate` reads."""
    from macs_audit.errors import UsageError
    from macs_audit.models.export import export_onnx
    from macs_audit.models.predictor import ONNX_SUFFIXES

    if checkpoint.suffix.lower() in ONNX_SUFFIXES:
        raise UsageError(f"{checkpoint} is already an ONNX model")
    flags = model_flags(arch, num_classes, input_size, mean, std, output_kind)
    predictor = open_torch_model(checkpoint, flags, "cpu", trust_pickled)
    out = out or checkpoint.with_suffix(".onnx")
    meta = predictor.config.as_metadata()
    if meta.get("output") == "auto":
        meta.pop("output")
    export_onnx(predictor.model.cpu().eval(), out, meta, opset=opset)
    stderr.print(f"ONNX model written to {out}")
