"""Write models: safetensors weights, sidecar JSON, single-file ONNX with our metadata, and checkpoint export."""

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from macs_audit.atomic import atomic_path, write_text
from macs_audit.errors import InputError, UsageError
from macs_audit.models.backend import one_line
from macs_audit.models.config import encode_metadata
from macs_audit.models.predictor import ONNX_SUFFIXES, check_prompts_read, load_torch_predictor
from macs_audit.outputs import Inputs, check_file

# Node metadata keys the dynamo exporter fills with stack traces, source paths and module names
# of the machine that built the model; an exported file must not carry them.
_LEAKY_METADATA = ("stack_trace", "pkg.torch", "namespace", "source", "fx_node", "class_hierarchy")
# The ONNX opsets torch.onnx.export (dynamo) writes. Its operators are implemented at opset 18 (torch's
# TORCHLIB_OPSET); another opset is reached by onnxscript's version converter, which converts between 18 and
# 25 (its SUPPORTED_MIN/MAX_ONNX_OPSET). Outside that range torch falls back to onnx's C converter, which
# fails on common operators, prints its traceback and writes the model at opset 18 regardless.
DEFAULT_OPSET = 18
MIN_OPSET, MAX_OPSET = 18, 25
# The formats whose weights are written as safetensors, with a sidecar naming the architecture (a timm name,
# torchvision:NAME) that reads them back.
STATE_DICT_FORMATS = ("safetensors", "state-dict", "timm-folder", "torchvision")
HF_FORMAT = "hf-transformers"  # written back as a save_pretrained folder (with the sidecar beside it)
# Sources that are read but not written as torch weights: their ONNX export is the model to ship.
UNWRITTEN_FORMATS = {
    "torch-export": "a torch.export program is not trained or rewritten here: fine-tune the module it was "
    "exported from, or calibrate its ONNX export",
    "open-clip": "an OpenCLIP zero-shot classifier is not fine-tuned or rewritten here: calibrate its ONNX export "
    "(macs-audit export --arch open_clip:NAME --class-prompts FILE), or read the audit's calibrators",
}
SOURCES_PROPERTY = "macs_audit.sources"  # where each exported value was set; not a config key


def check_opset(opset: int) -> int:
    """`opset` if torch.onnx.export can write it, else a UsageError naming the range (before any export)."""
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UsageError(
            f"--opset {opset} is not supported: torch.onnx.export writes ONNX opsets {MIN_OPSET} to {MAX_OPSET} "
            f"(default {DEFAULT_OPSET}); choose one your runtime reads"
        )
    return opset


def save_safetensors(model, path: str | Path) -> None:
    from safetensors.torch import save_file

    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp))


def write_sidecar(path: str | Path, meta: dict[str, Any]) -> None:
    write_text(path, json.dumps(meta, indent=2) + "\n")


def strip_build_metadata(proto) -> None:
    """Remove per-node and per-function metadata that records the exporting machine."""

    def clean(props):
        keep = [p for p in props if not any(tag in p.key for tag in _LEAKY_METADATA)]
        del props[:]
        props.extend(keep)

    def clean_graph(graph):
        for node in graph.node:
            clean(node.metadata_props)
            node.doc_string = ""
            for attr in node.attribute:
                if attr.g is not None and attr.g.ByteSize():
                    clean_graph(attr.g)
        graph.doc_string = ""

    clean_graph(proto.graph)
    for fn in proto.functions:
        for node in fn.node:
            clean(node.metadata_props)
            node.doc_string = ""
    proto.doc_string = ""


def export_onnx(
    model,
    path: str | Path,
    meta: dict[str, Any],
    opset: int = DEFAULT_OPSET,
    sources: dict[str, str] | None = None,
    feature_layer: str | None = None,
) -> None:
    """Export an eval-mode torch model to one self-contained ONNX file with a dynamic batch axis.

    `meta` (arch, num_classes, input_size, mean, std, output, class_names) goes into the file's
    metadata properties, which `evaluate` reads, so the file needs no sidecar; `sources` (where each value
    was set: a flag, the sidecar, the model's own config) into `macs_audit.sources`, for the record.
    With `feature_layer` (a module of `model`), the input of that module is a second output, `features`
    (models/features.py's FEATURES_OUTPUT), which `evaluate` reads as the model's penultimate features.
    """
    import onnx
    import torch

    from macs_audit.models.features import FEATURES_OUTPUT, features_module

    check_opset(opset)
    model = model.eval()
    outputs = ["logits"]
    if feature_layer is not None:
        model, outputs = features_module(model, feature_layer), ["logits", FEATURES_OUTPUT]
    h, w = meta.get("input_size", (32, 32))
    example = torch.zeros(2, len(meta.get("mean", (0, 0, 0))), h, w)
    try:
        program = torch.onnx.export(
            model,
            (example,),
            None,
            input_names=["images"],
            output_names=outputs,
            dynamic_shapes=({0: torch.export.Dim("batch")},),  # by position: forward(x), forward(input), ...
            dynamo=True,
            opset_version=opset,
            optimize=True,
            verbose=False,
        )
    except Exception as exc:  # torch.export raises many types; give one line
        raise InputError(f"ONNX export failed: {type(exc).__name__}: {one_line(exc)}") from None
    if program is None:  # only with dynamo=False, which is never used here
        raise InputError("ONNX export returned no program")
    proto = program.model_proto
    strip_build_metadata(proto)
    del proto.metadata_props[:]
    for key, value in encode_metadata(meta).items():
        proto.metadata_props.add(key=key, value=value)
    if sources:
        proto.metadata_props.add(key=SOURCES_PROPERTY, value=json.dumps(sources))
    proto.producer_name = "macs-audit"
    with atomic_path(path) as tmp:
        onnx.save_model(proto, str(tmp), save_as_external_data=False)
        onnx.checker.check_model(str(tmp))  # before it lands: `path` may be a stream


@dataclasses.dataclass(frozen=True)
class CheckpointReading:
    """How a PyTorch checkpoint is read (`load_torch_predictor`): the command line's ModelConfig keys, whether
    its pickles are trusted (--trust-pickled), whether the libraries' warnings show (--debug), and an OpenCLIP
    model's classes and templates (--class-prompts), whose text embeddings an exported graph holds as its
    classifier."""

    flags: dict
    trust_pickled: bool = False
    debug: bool = False
    class_prompts: Path | None = None


def export_checkpoint(
    checkpoint: Path,
    reading: CheckpointReading,
    out: Path | None = None,
    opset: int = DEFAULT_OPSET,
    force: bool = False,
    on_warning: Callable[[str], None] | None = None,
    inputs: Inputs = (),
    feature_layer: str | None = None,
) -> Path:
    """Export a PyTorch checkpoint, read as `reading` says, to one ONNX file (`out`, default: CHECKPOINT with
    .onnx) with its metadata. The output is checked first: never one of the run's `inputs` (inputs.run_inputs:
    the checkpoint, its sidecar or folder, the hub cache's files of an hf-hub: --arch, --class-prompts, a build's
    data); an existing file only with `force`.
    `on_warning` hears what `evaluate` warns of the model (CIFAR-10's mean/std on a model that declares none), and
    that the file has no `features` output where the model's final linear layer is not found (models/features.py;
    `feature_layer` names it, and an error follows where that is no linear layer)."""
    from macs_audit.models.features import FEATURES_OUTPUT, torch_head

    if checkpoint.suffix.lower() in ONNX_SUFFIXES:
        raise UsageError(f"{checkpoint} is already an ONNX model")
    check_opset(opset)
    path = out or checkpoint.with_suffix(".onnx")
    check_file(path, inputs=inputs, option="--out", force=force)  # never an input, --force or not
    class_prompts = reading.class_prompts
    predictor = load_torch_predictor(
        checkpoint, reading.flags, "cpu", reading.trust_pickled, debug=reading.debug, class_prompts=class_prompts
    )
    check_prompts_read(class_prompts, predictor)
    if predictor.info["format"] == "torchscript":
        raise InputError(
            f"{checkpoint} is TorchScript, which torch.export cannot trace to ONNX: evaluate and calibrate read it "
            "as it is; to export, save the module's state dict (with --arch) instead"
        )
    # Only what was declared: a default (CIFAR-10's mean/std, 32 px) written as metadata would read as the
    # model's own next time, and its warning would be lost.
    meta = predictor.config.as_metadata(declared_only=True)
    if meta.get("output") == "auto":
        meta.pop("output")
    sources = {k: v for k, v in predictor.config.declared_sources().items() if k in meta}
    model = predictor.model.cpu().eval()
    try:  # the penultimate features as a second output, where the final linear layer is found
        layer: str | None = torch_head(model, feature_layer, str(checkpoint))[0]
        unfound = None
    except InputError as exc:
        if feature_layer is not None:
            raise
        layer, unfound = None, f"the ONNX file has no {FEATURES_OUTPUT} output: {exc}"
    export_onnx(model, path, meta, opset=opset, sources=sources, feature_layer=layer)
    if on_warning is not None:
        for message in [*predictor.info.get("warnings", []), *([unfound] if unfound else [])]:
            on_warning(message)
    return path


def weights_path(folder: Path, stem: str, fmt: str) -> Path:
    """Where `write_weights` puts weights of format `fmt` (a predictor's info["format"]): STEM.safetensors for a
    state dict, the folder STEM for a Hugging Face model (save_pretrained), STEM.pt for TorchScript and pickled
    modules."""
    if fmt == HF_FORMAT:
        return folder / stem
    return folder / f"{stem}{'.safetensors' if fmt in STATE_DICT_FORMATS else '.pt'}"


def check_writable(fmt: str) -> None:
    """An InputError before any work when a model read as `fmt` cannot be written back as torch weights."""
    if fmt in UNWRITTEN_FORMATS:
        raise InputError(UNWRITTEN_FORMATS[fmt])


def model_files(stem: str, *, torch_weights: bool = True, onnx_file: bool = False) -> list[str]:
    """The names a model written as STEM may have in a folder, for the checks of a command's outputs before it
    writes one: torch weights under either name `weights_path` gives, the ONNX file, and the sidecar."""
    weights = [f"{stem}.safetensors", f"{stem}.pt"] if torch_weights else []
    return [*weights, *([f"{stem}.onnx"] if onnx_file else []), f"{stem}.json"]


def write_weights(model: Any, path: Path, fmt: str) -> None:
    """Weights as safetensors; a Hugging Face model as a save_pretrained folder; a TorchScript or pickled module
    stays in its own format."""
    check_writable(fmt)
    if fmt in STATE_DICT_FORMATS:
        save_safetensors(model, path)
        return
    if fmt == HF_FORMAT:
        from macs_audit.models.huggingface import save_pretrained

        save_pretrained(model, path)
        return
    import torch

    with atomic_path(path) as tmp:
        (torch.jit.save if fmt == "torchscript" else torch.save)(model, str(tmp))


def export_if_possible(model: Any, path: Path, meta: dict, fmt: str) -> str | None:
    """Export `model` to ONNX at `path`; None when written, else why not (TorchScript only: others raise)."""
    try:
        export_onnx(model, path, meta)
    except InputError as exc:
        if fmt != "torchscript":
            raise
        # torch.export cannot trace TorchScript; the fine-tuned TorchScript file is the deliverable.
        return f"no ONNX export for a TorchScript model ({str(exc)[:120]}...)"
    return None
