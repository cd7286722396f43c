"""A fine-tuning run from files to files: open the model, audit it, train it, write it, audit what was written.

OUT receives NAME.safetensors (or NAME.pt for TorchScript and pickled modules, kept in their format),
NAME.json (the sidecar), NAME.onnx, checkpoint.pt, finetune_config.json and the before/after audit
(finetune.audits). Every file is written atomically. Under torchrun (`ctx`) every rank trains and
audits its shard; rank 0 alone writes. Nothing here prints: progress goes to the callback. OUT is
checked before anything is loaded: none of its files may be an input (the model, its sidecar, the
data), and existing outputs are replaced only with `force` (or `resume`, which continues that run).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from macs_audit import distributed
from macs_audit.atomic import write_text
from macs_audit.audit import AuditOptions
from macs_audit.compare import Comparison
from macs_audit.data.loading import DataSpec, load_data
from macs_audit.distributed import SINGLE, Context
from macs_audit.errors import UsageError
from macs_audit.finetune.audits import AFTER, BEFORE, BEFORE_AFTER_FILES, ProgressFn, audit_model, write_before_after
from macs_audit.finetune.options import FinetuneOptions
from macs_audit.models.config import sidecar_path
from macs_audit.models.export import export_if_possible, write_sidecar, write_weights
from macs_audit.models.predictor import load_torch_predictor
from macs_audit.outputs import check_folder
from macs_audit.report import Report

CHECKPOINT_FILE = "checkpoint.pt"
CONFIG_FILE = "finetune_config.json"


def output_names(name: str) -> list[str]:
    """The files a run writes into OUT besides its checkpoint: NAME's weights (.safetensors, or .pt for
    TorchScript and pickled modules), sidecar and ONNX export, the run's config and the audits."""
    return [f"{name}.safetensors", f"{name}.pt", f"{name}.json", f"{name}.onnx", CONFIG_FILE, *BEFORE_AFTER_FILES]


@dataclasses.dataclass
class FinetuneRun:
    weights: Path  # the fine-tuned weights in OUT
    onnx: Path | None  # its ONNX export; None when the model could not be exported
    onnx_skipped: str | None  # why not (a TorchScript model cannot be traced for export)
    before: Report
    after: Report
    comparison: Comparison | None  # after against before; None on ranks other than 0, which write nothing
    title: str


def run_finetune(
    model: Path,
    flags: dict,
    train: DataSpec,
    eval_data: DataSpec,
    out: Path,
    options: FinetuneOptions,
    audit: AuditOptions,
    *,
    name: str = "model",
    device: str = "cpu",
    trust_pickled: bool = False,
    resume: bool = False,
    progress: ProgressFn | None = None,
    ctx: Context = SINGLE,
    debug: bool = False,
    force: bool = False,
) -> FinetuneRun:
    """Fine-tune the PyTorch `model` on `train` with `options` (its preprocessing and device are taken from
    the model), write it to `out` as NAME.*, and audit it before and after on `eval_data`.

    `device` is this rank's device; `debug` lets the libraries' warnings through while models load.
    Raises UsageError for an ONNX model, a checkpoint in `out` without `resume`, an output that would
    replace an input, existing outputs without `force` or `resume`, or a class count that does not match
    the training data.
    """
    from macs_audit.finetune.loop import finetune  # torch

    inputs = (model, sidecar_path(model), train.path, eval_data.path)
    check_folder(out, [CHECKPOINT_FILE], inputs=inputs)
    checkpoint = out / CHECKPOINT_FILE
    if checkpoint.exists() and not resume:
        raise UsageError(
            f"{out} already holds a fine-tuning checkpoint; pass --resume to continue it or choose another --out"
        )
    check_folder(out, output_names(name), inputs=inputs, force=force or resume)
    predictor = load_torch_predictor(model, flags, device, trust_pickled, debug=debug)
    cfg = predictor.config
    options = dataclasses.replace(
        options,
        input_size=tuple(cfg.input_size),
        mean=tuple(cfg.mean),
        std=tuple(cfg.std),
        device=predictor.info["device"],
    ).validate()
    image_size = cfg.input_size
    train_source, train_info = load_data(train, image_size)
    if cfg.num_classes is not None and cfg.num_classes != train_source.num_classes:
        raise UsageError(f"the model has {cfg.num_classes} classes but {train.path} has {train_source.num_classes}")
    eval_source, eval_info = load_data(eval_data, image_size)
    title = f"{options.objective} fine-tuning of {model.name}: before / after on {eval_source.name}"
    out.mkdir(parents=True, exist_ok=True)
    distributed.barrier(ctx)  # every rank has checked for an old checkpoint before rank 0 writes one
    started = time.time()

    def audit_file(path: Path, path_flags: dict, label: str) -> Report:
        return audit_model(
            path, path_flags, device, eval_source, eval_info, audit, progress, trust_pickled, label, ctx, debug
        )

    before = audit_file(model, flags, BEFORE)
    result = finetune(predictor.model.train(), train_source, options, progress, checkpoint, resume, ctx)
    trained = result.model.cpu().eval()
    fmt = predictor.info["format"]
    weights = out / (f"{name}.safetensors" if fmt in ("safetensors", "state-dict") else f"{name}.pt")
    if not ctx.is_main:  # rank 0 writes the outputs; the others join the sharded audit of them
        distributed.barrier(ctx)
        after = audit_file(weights, {}, AFTER)
        return FinetuneRun(weights, None, None, before, after, None, title)
    meta = cfg.as_metadata()
    meta["output"] = "logits"
    write_weights(trained, weights, fmt)
    sha256 = predictor.info["sha256"]
    summary = {
        "objective": options.objective,
        "from": model.name,
        "from_sha256": sha256,
        "steps": result.steps,
        "final_val": result.history[-1]["val"] if result.history else None,
    }
    write_sidecar(out / f"{name}.json", {**meta, "finetune": summary})
    onnx_skipped = export_if_possible(trained, out / f"{name}.onnx", meta, fmt)
    onnx_path = None if onnx_skipped else out / f"{name}.onnx"
    write_text(
        out / CONFIG_FILE,
        json.dumps(
            {
                "options": options.to_dict(),
                "model": {**meta, "from": str(model), "from_sha256": sha256, "format": fmt},
                "data": {"source": train_source.name, "n": len(train_source), **train_info},
                "split": result.split,
                "eval_data": {"source": eval_source.name, "n": len(eval_source), **eval_info},
                "audit": {
                    "batch_size": audit.batch_size,
                    "bootstrap": audit.bootstrap,
                    "calibration_split": audit.calibration_split,
                    "seed": audit.seed,
                    "perturbations": list(audit.perturbations),
                    "sensitivity_samples": audit.sensitivity_samples,
                    "corruptions": list(audit.corruptions),
                    "severities": list(audit.severities),
                },
                "steps": result.steps,
                "resumed_from_epoch": result.resumed_from_epoch,
                "resumed_from_step": result.resumed_from_step,
                "history": result.history,
                "seconds_this_run": round(time.time() - started, 1),
            },
            indent=2,
        )
        + "\n",
    )
    distributed.barrier(ctx)  # the weights are written before the other ranks read them
    after = audit_file(weights, {}, AFTER)
    comparison = write_before_after(out, before, after, title)
    return FinetuneRun(weights, onnx_path, onnx_skipped, before, after, comparison, title)
