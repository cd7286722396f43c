"""`macs-audit export CHECKPOINT`: one ONNX file with the metadata `evaluate` reads."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from macs_audit.cli.console import handle_errors, note, state
from macs_audit.cli.options import (
    ARCH_OPTION,
    CROP_PCT_OPTION,
    FORCE_OPTION,
    INPUT_SIZE_OPTION,
    MEAN_OPTION,
    MODEL_OUTPUT_OPTION,
    NUM_CLASSES_OPTION,
    STD_OPTION,
    TRUST_PICKLED_OPTION,
    model_flags,
)


@handle_errors
def export(
    checkpoint: Path = typer.Argument(
        ...,
        readable=False,
        help="PyTorch checkpoint: a .safetensors/.pt state dict (with --arch or a sidecar JSON), or a pickled module "
        "with --trust-pickled-model-code. Not TorchScript: torch.export cannot trace it (evaluate reads it as it is).",
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", readable=False, help="ONNX file to write. Default: CHECKPOINT with .onnx."
    ),
    arch: Optional[str] = ARCH_OPTION,
    num_classes: Optional[int] = NUM_CLASSES_OPTION,
    input_size: Optional[str] = INPUT_SIZE_OPTION,
    crop_pct: Optional[float] = CROP_PCT_OPTION,
    mean: Optional[str] = MEAN_OPTION,
    std: Optional[str] = STD_OPTION,
    output_kind: Optional[str] = MODEL_OUTPUT_OPTION,
    opset: int = typer.Option(18, "--opset", help="ONNX opset version: 18 (the default) to 25."),
    trust_pickled: bool = TRUST_PICKLED_OPTION,
    force: bool = FORCE_OPTION,
) -> None:
    """Export a PyTorch CHECKPOINT to one ONNX file (dynamic batch) with the metadata `evaluate` reads."""
    from macs_audit.atomic import destination
    from macs_audit.models.export import export_checkpoint

    path = export_checkpoint(
        checkpoint,
        model_flags(arch, num_classes, input_size, mean, std, output_kind, crop_pct),
        out,
        opset=opset,
        trust_pickled=trust_pickled,
        debug=state["debug"],
        force=force,
    )
    note(f"ONNX model written to {destination(path).describe()}")
