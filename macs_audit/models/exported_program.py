"""torch.export programs (`.pt2`, `torch.save`'s successor for deployment, which TorchScript's deprecation
points to): `torch.export.load`, then the program's module. Its input's static height and width are the
model's own input size and its output's width the class count. A program exported with a fixed batch
size runs in batches of that size (the last one padded), so any batch the audit hands it works."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from typing import Any

from macs_audit.errors import InputError
from macs_audit.models import config as model_config
from macs_audit.models.sources import TORCH_EXPORT

ORIGIN = "exported program"


def _static(dim: Any) -> int | None:
    return dim if isinstance(dim, int) else None


def program_shapes(program: Any) -> tuple[list[int | None], list[int | None]]:
    """The (input, output) shapes of an ExportedProgram's one user input and first output (None: dynamic)."""
    user_inputs = [
        spec.arg.name
        for spec in program.graph_signature.input_specs
        if spec.kind.name == "USER_INPUT" and hasattr(spec.arg, "name")
    ]
    nodes = {node.name: node for node in program.graph.nodes}
    if len(user_inputs) != 1:
        raise InputError(f"expected a program with one image input, found {len(user_inputs)} inputs")
    value = nodes[user_inputs[0]].meta.get("val")
    output = next(node for node in program.graph.nodes if node.op == "output")
    first = output.args[0][0] if output.args and output.args[0] else None
    out_value = first.meta.get("val") if first is not None and hasattr(first, "meta") else None

    def shape(v: Any) -> list[int | None]:
        return [_static(d) for d in v.shape] if v is not None and hasattr(v, "shape") else []

    return shape(value), shape(out_value)


def program_module(module: Any, batch: int | None) -> Any:
    """The program's module as the predictor runs it: any batch size when it was exported for `batch` images
    (chunks of `batch`, the last padded); train()/eval() not passed to it (an exported module refuses them; it
    runs as exported)."""
    import torch

    class Program(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.inner = inner

        def train(self, mode: bool = True) -> Program:
            self.training = mode
            return self

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if batch is None:
                return self.inner(x)
            outs = []
            for start in range(0, x.shape[0], batch):
                chunk = x[start : start + batch]
                real = chunk.shape[0]
                if real < batch:
                    chunk = torch.cat([chunk, chunk[-1:].expand(batch - real, *chunk.shape[1:])])
                outs.append(self.inner(chunk)[:real])
            return torch.cat(outs)

    return Program(module)


def load_exported_program(
    path: Path, flags: dict[str, Any], sidecar: dict[str, Any], device: str, precision: str, debug: bool
) -> Any:
    import torch

    from macs_audit.models.backend import library_warnings, one_line
    from macs_audit.models.torch import TorchPredictor

    if not zipfile.is_zipfile(path):
        raise InputError(f"cannot load torch.export program {path}: not a .pt2 archive (damaged or another file)")
    logger = logging.getLogger("torch.export")  # it logs a traceback before raising; ours is the one line
    with library_warnings(debug):
        was, logger.disabled = logger.disabled, not debug
        try:
            program = torch.export.load(str(path))
        except Exception as exc:  # a damaged archive, a program of a newer torch
            raise InputError(f"cannot load torch.export program {path}: {one_line(exc)}") from None
        finally:
            logger.disabled = was
    try:
        in_shape, out_shape = program_shapes(program)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    if len(in_shape) != 4:
        raise InputError(f"{path}: expected an (N, C, H, W) image input, found shape {in_shape}")
    meta: dict[str, Any] = {}
    if in_shape[2] is not None and in_shape[3] is not None:
        meta["input_size"] = in_shape[2:]
    if len(out_shape) == 2 and out_shape[1] is not None:
        meta["num_classes"] = out_shape[1]
    cfg = model_config.resolve(flags, sidecar, meta, metadata_origin=ORIGIN)
    if "input_size" in meta and list(cfg.input_size) != meta["input_size"]:
        raise InputError(f"{path}: the program's input is {in_shape[2]}x{in_shape[3]}, not {cfg.input_size}")
    if "num_classes" in meta and cfg.num_classes != meta["num_classes"]:
        outputs = meta["num_classes"]
        raise InputError(f"{path}: the program has {outputs} outputs but --num-classes is {cfg.num_classes}")
    module = program_module(program.module(), in_shape[0])
    return TorchPredictor.of_module(module, cfg, path, TORCH_EXPORT, device, precision)
