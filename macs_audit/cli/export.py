"""`macs-audit export CHECKPOINT`: one ONNX file with the metadata `evaluate` reads; with `--precision fp16|int8`,
its reduced-precision build (of a checkpoint's float export, or of a float ONNX model) and the parity audit of
the build against the float model."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

import typer

from macs_audit.cli.console import handle_errors, note, state, stdout, warn
from macs_audit.cli.options import (
    ARCH_OPTION,
    CLASS_PROMPTS_OPTION,
    CROP_PCT_OPTION,
    FORCE_OPTION,
    INPUT_SIZE_OPTION,
    INTERPOLATION_OPTION,
    MEAN_OPTION,
    MODEL_OUTPUT_OPTION,
    NUM_CLASSES_OPTION,
    PROVIDER_OPTION,
    QUIET_OPTION,
    REFERENCE_PROVIDER_OPTION,
    STD_OPTION,
    TRUST_PICKLED_OPTION,
    audit_options,
    model_flags,
)
from macs_audit.models.precision import CPU_INT8_TARGET, DEFAULT_CALIBRATION_IMAGES, GPU_INT8_TARGET, INT8_TARGETS
from macs_audit.text import or_list


@handle_errors
def export(
    checkpoint: Path = typer.Argument(
        ...,
        readable=False,
        help="PyTorch checkpoint: a .safetensors/.pt state dict (with --arch or a sidecar JSON), or a pickled module "
        "with --trust-pickled-model-code. Not TorchScript: torch.export cannot trace it (evaluate reads it as it is). "
        "With --precision fp16 or int8, also a float ONNX model.",
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", readable=False, help="ONNX file to write. Default: CHECKPOINT with .onnx."
    ),
    arch: Optional[str] = ARCH_OPTION,
    num_classes: Optional[int] = NUM_CLASSES_OPTION,
    input_size: Optional[str] = INPUT_SIZE_OPTION,
    crop_pct: Optional[float] = CROP_PCT_OPTION,
    interpolation: Optional[str] = INTERPOLATION_OPTION,
    class_prompts: Optional[Path] = CLASS_PROMPTS_OPTION,
    mean: Optional[str] = MEAN_OPTION,
    std: Optional[str] = STD_OPTION,
    output_kind: Optional[str] = MODEL_OUTPUT_OPTION,
    opset: int = typer.Option(18, "--opset", help="ONNX opset version: 18 (the default) to 25."),
    trust_pickled: bool = TRUST_PICKLED_OPTION,
    force: bool = FORCE_OPTION,
    precision: str = typer.Option(
        "fp32",
        "--precision",
        help="fp32 (the float export), fp16 (onnxruntime's float16 converter, float32 inputs and outputs) or int8 "
        "(onnxruntime's static quantizer: QDQ, per-channel weights; needs --calibration-data). A build is audited "
        "against the float model it was made from.",
    ),
    calibration_data: Optional[Path] = typer.Option(
        None,
        "--calibration-data",
        readable=False,
        help="INT8: images to fit the activation ranges on (any --data format, or builtin: the built-in test set).",
    ),
    calibration_images: Optional[int] = typer.Option(
        None,
        "--calibration-images",
        help=f"INT8: how many class-stratified calibration images to draw. Default: {DEFAULT_CALIBRATION_IMAGES}, "
        "or every image of a smaller set.",
    ),
    int8_target: Optional[str] = typer.Option(
        None,
        "--int8-target",
        help="INT8: the hardware the build is for, quantised as onnxruntime advises for it: "
        f"{or_list(f'{name} ({target.description})' for name, target in INT8_TARGETS.items())}. Default: "
        f"{GPU_INT8_TARGET} with a GPU --provider, else {CPU_INT8_TARGET} (8-bit weights saturate on x86-64 CPUs "
        "without VNNI).",
    ),
    data: Optional[Path] = typer.Option(
        None, "--data", readable=False, help="The parity audit's data (default: the built-in CIFAR-10 test set)."
    ),
    limit: Optional[int] = typer.Option(None, "--limit", help="Audit a class-stratified subset of N images."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=0, help="Resamples of the paired 95% intervals."),
    perturbations: str = typer.Option(
        "noise+blur", "--perturbations", help="The parity audit's perturbation views (as evaluate's), or none."
    ),
    corruptions: Optional[str] = typer.Option(
        None, "--corruptions", help="The parity audit's corruption grid (as evaluate's): all, benchmark or names."
    ),
    severities: str = typer.Option("1-5", "--severities", help="Corruption severities, e.g. 1-5 or 3."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the calibration draw, subsets and bootstrap."),
    audit: bool = typer.Option(True, "--audit/--no-audit", help="Audit the build against the float model."),
    provider: Optional[str] = PROVIDER_OPTION,
    reference_provider: Optional[str] = REFERENCE_PROVIDER_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Export a PyTorch CHECKPOINT to one ONNX file (dynamic batch) with the metadata `evaluate` reads; with
    --precision fp16 or int8, build it at that precision and print the parity audit of the build."""
    from macs_audit.atomic import all_or_nothing, destination
    from macs_audit.data.loading import DataSpec
    from macs_audit.deployment import Calibration, check_build, check_providers
    from macs_audit.errors import UsageError
    from macs_audit.inputs import run_inputs
    from macs_audit.models.export import export_checkpoint

    if out is not None and destination(out).fd is not None:  # the build's audit and evaluate read the file back
        raise UsageError(f"--out {out}: export writes a model file, not a stream; give a file name")
    flags = model_flags(arch, num_classes, input_size, mean, std, output_kind, crop_pct, interpolation)
    export_float = functools.partial(
        export_checkpoint,
        flags=flags,
        opset=opset,
        trust_pickled=trust_pickled,
        debug=state["debug"],
        force=force,
        class_prompts=class_prompts,
        on_warning=warn,
    )
    builtin = calibration_data is not None and str(calibration_data) == "builtin"
    spec = DataSpec(None, "builtin") if builtin else _spec(calibration_data)
    calibration = Calibration(spec, calibration_images, seed) if calibration_data else None
    # The options' consistency (INT8's options with --precision int8 only) before the float export, which takes time.
    if check_build(precision, calibration, int8_target) != "fp32":
        check_providers(provider, reference_provider, audit)  # a GPU provider without a GPU: before any write
        # Every file the run reads, which neither the float export nor the build may replace, --force or not.
        data_read = [*([spec.path] if calibration else []), *([data] if audit else [])]
        inputs = run_inputs(models=[(checkpoint, arch)], data=data_read, files=[class_prompts])
        float_export = checkpoint.with_suffix(".onnx") if checkpoint.suffix.lower() != ".onnx" else None
        if float_export is not None:
            _check_build_output(float_export, precision, out, force, inputs)
        options = audit_options(None, 0.2, bootstrap, seed, perturbations, 0, corruptions, severities, calibrators=())
        # A failed build leaves no new file, not the float export it was to be made from, and an earlier float
        # export (--force) as it was.
        with all_or_nothing([float_export] if float_export is not None else []):
            if float_export is not None:
                checkpoint = export_float(checkpoint, out=None, inputs=inputs)
                note(f"float ONNX model written to {destination(checkpoint).describe()}")
            _build(
                checkpoint,
                precision,
                out,
                flags,
                calibration,
                _spec(data, limit, seed) if audit else None,
                options,
                quiet,
                force,
                (provider, reference_provider),
                int8_target,
                warned=float_export is not None,
                inputs=inputs,
            )
        return
    path = export_float(checkpoint, out=out, inputs=run_inputs(models=[(checkpoint, arch)], files=[class_prompts]))
    note(f"ONNX model written to {destination(path).describe()}")


def _check_build_output(float_export: Path, precision: str, out: Optional[Path], force: bool, inputs) -> None:
    """The build's output checked before the checkpoint's float export is written: a run refused for it writes
    nothing."""
    from macs_audit.deployment import default_output
    from macs_audit.outputs import check_file

    target = out or default_output(float_export, precision)
    check_file(target, inputs=(*inputs, float_export), option="--out", force=force)


def _spec(path: Optional[Path], limit: Optional[int] = None, seed: int = 0):
    from macs_audit.data.loading import DataSpec

    return DataSpec(path, limit=limit, seed=seed)


def _build(
    reference,
    precision,
    out,
    flags,
    calibration,
    audit_data,
    options,
    quiet,
    force,
    providers,
    int8_target,
    warned,
    inputs,
) -> None:
    """The reduced-precision build and its parity audit, printed (the parity section's tables)."""
    from macs_audit.atomic import destination
    from macs_audit.cli.progress import Progress, show_progress
    from macs_audit.deployment import build_precision
    from macs_audit.formats import layout, terminal

    with Progress(show_progress(quiet)) as progress:
        built = build_precision(
            reference,
            precision,
            out,
            flags=flags,
            calibration=calibration,
            audit_data=audit_data,
            audit_options=options,
            progress=progress,
            force=force,
            provider=providers[0],
            reference_provider=providers[1],
            int8_target=int8_target,
            inputs=inputs,
        )
    if not warned:  # a checkpoint's export has warned of the same model
        for message in built.warnings:
            warn(message)
    for message in built.parity_warnings:  # a model of the pair that took the other's settings
        warn(message)
    used = ""
    if built.int8_target:
        every = calibration.images is None and (built.calibration_images or 0) < DEFAULT_CALIBRATION_IMAGES
        count = f"all {built.calibration_images} images of the calibration data" if every else None
        count = count or f"{built.calibration_images} calibration images"
        used = f" ({count}; {INT8_TARGETS[built.int8_target].description})"
    note(f"{precision.upper()} model written to {destination(built.path).describe()}{used}")
    if built.report is not None:
        parity = layout.section("parity")
        content = parity.build(built.report)
        if content is not None:
            stdout.print(*(terminal.titled(t) for t in terminal.section_tables(parity, content)))
