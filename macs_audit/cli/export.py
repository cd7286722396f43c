"""`macs-audit export CHECKPOINT`: one ONNX file with the metadata `evaluate` reads; with `--precision fp16|int8`,
its reduced-precision build (of a checkpoint's float export, or of a float ONNX model) and the parity audit of
the build against the float model."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from macs_audit.cli.console import handle_errors, note, state, stdout, warn
from macs_audit.cli.parameters import given_values, takes_options

if TYPE_CHECKING:
    from macs_audit.deployment import Build


@handle_errors
@takes_options("export")
def export(**values: Any) -> None:
    """Export a PyTorch CHECKPOINT to one ONNX file (dynamic batch) with the metadata `evaluate` reads; with
    --precision fp16 or int8, build it at that precision and print the parity audit of the build. Options not
    given come from the spec (its export table; see --config)."""
    from macs_audit.atomic import all_or_nothing, destination
    from macs_audit.cli.progress import Progress, show_progress
    from macs_audit.data.loading import DataSpec
    from macs_audit.deployment import BuildSpec, Calibration, ParityAudit, build_precision, check_build, check_providers
    from macs_audit.errors import UsageError
    from macs_audit.inputs import run_inputs
    from macs_audit.models.export import CheckpointReading, export_checkpoint
    from macs_audit.settings.parse import model_flags, parse_audit_options
    from macs_audit.settings.resolve import resolve

    r = resolve("export", *given_values(values))
    checkpoint, out, precision = r["checkpoint"], r["out"], r["precision"]
    if out is not None and destination(out).fd is not None:  # the build's audit and evaluate read the file back
        raise UsageError(f"--out {out}: export writes a model file, not a stream; give a file name")
    flags = model_flags(
        r["arch"],
        r["num_classes"],
        r["input_size"],
        r["mean"],
        r["std"],
        r["output_kind"],
        r["crop_pct"],
        r["interpolation"],
    )
    export_float = functools.partial(
        export_checkpoint,
        reading=CheckpointReading(flags, r["trust_pickled"], state["debug"], r["class_prompts"]),
        opset=r["opset"],
        force=r["force"],
        on_warning=warn,
        feature_layer=r["feature_layer"],
    )
    calibration_data = r["calibration_data"]
    builtin = calibration_data is not None and str(calibration_data) == "builtin"
    spec = DataSpec(None, "builtin") if builtin else _spec(calibration_data)
    calibration = Calibration(spec, r["calibration_images"], r["seed"]) if calibration_data else None
    build = BuildSpec(precision, calibration, r["int8_target"], r["provider"], r["reference_provider"])
    # The options' consistency (INT8's options with --precision int8 only) before the float export, which takes time.
    if check_build(build.precision, build.calibration, build.int8_target) != "fp32":
        check_providers(build.provider, build.reference_provider, r["audit"])  # a GPU provider without a GPU: now
        # Every file the run reads, which neither the float export nor the build may replace, --force or not.
        data_read = [*([spec.path] if calibration else []), *([r["data"]] if r["audit"] else [])]
        inputs = run_inputs(models=[(checkpoint, r["arch"])], data=data_read, files=[r["class_prompts"]])
        float_export = checkpoint.with_suffix(".onnx") if checkpoint.suffix.lower() != ".onnx" else None
        if float_export is not None:
            _check_build_output(float_export, precision, out, r["force"], inputs)
        options = parse_audit_options(
            None,
            0.2,
            r["bootstrap"],
            r["seed"],
            r["perturbations"],
            0,
            r["corruptions"],
            r["severities"],
            calibrators=(),
        )
        # A failed build leaves no new file, not the float export it was to be made from, and an earlier float
        # export (--force) as it was.
        with all_or_nothing([float_export] if float_export is not None else []):
            if float_export is not None:
                checkpoint = export_float(checkpoint, out=None, inputs=inputs)
                note(f"float ONNX model written to {destination(checkpoint).describe()}")
            audit = ParityAudit(_spec(r["data"], r["limit"], r["seed"]), options) if r["audit"] else None
            with Progress(show_progress(r["quiet"])) as progress:
                built = build_precision(
                    checkpoint, build, out, flags=flags, audit=audit, progress=progress, force=r["force"], inputs=inputs
                )
        _print_build(built, calibration.images if calibration else None, warned=float_export is not None)
        return
    inputs = run_inputs(models=[(checkpoint, r["arch"])], files=[r["class_prompts"]])
    path = export_float(checkpoint, out=out, inputs=inputs)
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


def _print_build(built: Build, images_asked: int | None, warned: bool) -> None:
    """The reduced-precision build and its parity audit, printed (the parity section's tables; INT8's calibration
    images, all of the data where fewer than the default and no number was asked); the float model's warnings
    unless its export has `warned` of the same model."""
    from macs_audit.atomic import destination
    from macs_audit.formats import layout, terminal
    from macs_audit.models.precision import DEFAULT_CALIBRATION_IMAGES, INT8_TARGETS

    if not warned:
        for message in built.warnings:
            warn(message)
    for message in built.parity_warnings:  # a model of the pair that took the other's settings
        warn(message)
    used = ""
    if built.int8_target:
        every = images_asked is None and (built.calibration_images or 0) < DEFAULT_CALIBRATION_IMAGES
        count = f"all {built.calibration_images} images of the calibration data" if every else None
        count = count or f"{built.calibration_images} calibration images"
        used = f" ({count}; {INT8_TARGETS[built.int8_target].description})"
    note(f"{built.precision.upper()} model written to {destination(built.path).describe()}{used}")
    if built.report is not None:
        parity = layout.section("parity")
        content = parity.build(built.report)
        if content is not None:
            stdout.print(*(terminal.titled(t) for t in terminal.section_tables(parity, content)))
