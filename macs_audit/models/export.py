"""Write models: safetensors weights, sidecar JSON, and single-file ONNX with our metadata."""

import json
from pathlib import Path
from typing import Any

from macs_audit.atomic import atomic_path, write_text
from macs_audit.errors import InputError
from macs_audit.models.config import encode_metadata

# Node metadata keys the dynamo exporter fills with stack traces, source paths and module names
# of the machine that built the model; an exported file must not carry them.
_LEAKY_METADATA = ("stack_trace", "pkg.torch", "namespace", "source", "fx_node", "class_hierarchy")


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


def export_onnx(model, path: str | Path, meta: dict[str, Any], opset: int = 18) -> None:
    """Export an eval-mode torch model to one self-contained ONNX file with a dynamic batch axis.

    `meta` (arch, num_classes, input_size, mean, std, output, class_names) goes into the file's
    metadata properties, which `evaluate` reads, so the file needs no sidecar.
    """
    import onnx
    import torch

    model = model.eval()
    h, w = meta.get("input_size", (32, 32))
    example = torch.zeros(2, len(meta.get("mean", (0, 0, 0))), h, w)
    try:
        program = torch.onnx.export(
            model, (example,), None, input_names=["images"], output_names=["logits"],
            dynamic_shapes={"x": {0: torch.export.Dim("batch")}}, dynamo=True, opset_version=opset,
            optimize=True, verbose=False,
        )
    except Exception as exc:  # torch.export raises many types; give one line
        raise InputError(f"ONNX export failed: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    if program is None:  # only with dynamo=False, which is never used here
        raise InputError("ONNX export returned no program")
    proto = program.model_proto
    strip_build_metadata(proto)
    del proto.metadata_props[:]
    for key, value in encode_metadata(meta).items():
        proto.metadata_props.add(key=key, value=value)
    proto.producer_name = "macs-audit"
    with atomic_path(path) as tmp:
        onnx.save_model(proto, str(tmp), save_as_external_data=False)
    onnx.checker.check_model(str(path))
