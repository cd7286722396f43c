"""Folding a fitted temperature into a model and writing it, so the calibrated model is an ordinary model file."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from macs_audit.atomic import atomic_path
from macs_audit.errors import InputError
from macs_audit.models.export import save_safetensors, write_sidecar

TEMPERATURE_METADATA_KEY = "macs_audit.temperature"  # informational; loaders ignore unknown keys


def fold_temperature_onnx(
    src, dst, temperature: float, metadata: dict | None = None, probabilities: bool = False
) -> None:
    """Write `src` with its first output divided by `temperature` (a Div node) to `dst`, one file.

    Metadata properties are kept; `metadata` (ModelConfig keys) is written over them so the file
    carries its own preprocessing. A model that outputs probabilities gets Log before the Div, and
    then outputs logits (declared in the metadata).
    """
    import onnx
    from onnx import helper, numpy_helper

    from macs_audit.atomic import atomic_path
    from macs_audit.models.backend import one_line
    from macs_audit.models.config import encode_metadata

    if not temperature > 0:
        raise InputError(f"the temperature must be positive, got {temperature}")
    try:
        proto = onnx.load(str(src))
    except Exception as exc:
        raise InputError(f"cannot read ONNX model {src}: {one_line(exc)}") from None
    graph = proto.graph
    out = graph.output[0]
    elem = out.type.tensor_type.elem_type
    raw = f"{out.name}_before_temperature"
    # Rename the output wherever it is produced or used, then compute the real output from it.
    for node in graph.node:
        node.output[:] = [raw if name == out.name else name for name in node.output]
        node.input[:] = [raw if name == out.name else name for name in node.input]
    const_t = np.asarray(temperature, dtype=onnx.helper.tensor_dtype_to_np_dtype(elem))
    graph.initializer.append(numpy_helper.from_array(const_t, f"{out.name}_temperature"))
    source = raw
    if probabilities:
        floor = np.asarray(1e-30, dtype=const_t.dtype)
        graph.initializer.append(numpy_helper.from_array(floor, f"{out.name}_prob_floor"))
        graph.node.extend(
            [
                helper.make_node("Max", [raw, f"{out.name}_prob_floor"], [f"{raw}_floored"]),
                helper.make_node("Log", [f"{raw}_floored"], [f"{raw}_log"]),
            ]
        )
        source = f"{raw}_log"
    graph.node.append(
        helper.make_node("Div", [source, f"{out.name}_temperature"], [out.name], name="macs_audit_temperature")
    )
    meta = dict(metadata or {})
    if probabilities:
        meta["output"] = "logits"
    encoded = encode_metadata(meta)
    encoded[TEMPERATURE_METADATA_KEY] = repr(float(temperature))
    props = {p.key: p.value for p in proto.metadata_props}  # keep the others, in order
    props.update(encoded)
    del proto.metadata_props[:]
    for key, value in props.items():
        proto.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(proto)
    with atomic_path(dst) as tmp:
        onnx.save_model(proto, str(tmp), save_as_external_data=False)


def fold_temperature_torch(model, temperature: float, example):
    """Return a copy of `model` whose logits are divided by `temperature`, and where it was folded.

    Folded into the classifier (timm's `get_classifier()`: weight and bias divided by T), so the
    calibrated model is the same architecture and loads from safetensors with no special key.
    Checked on `example` inputs; if the head is not linear in its weights, raises InputError.
    """
    import copy

    import torch

    if not temperature > 0:
        raise InputError(f"the temperature must be positive, got {temperature}")
    was_training = model.training
    model.eval()
    scaled = copy.deepcopy(model).eval()
    heads = _classifiers(scaled)
    if not heads:
        raise InputError(
            "cannot find a linear classifier to fold the temperature into; "
            "export the model to ONNX and calibrate that instead"
        )
    for h in heads:
        with torch.no_grad():
            h.weight.div_(temperature)
            if h.bias is not None:
                h.bias.div_(temperature)
    with torch.no_grad():
        want = model(example).float() / temperature
        got = scaled(example).float()
    model.train(was_training)
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5 * float(want.abs().max().clamp_min(1))):
        raise InputError(
            "folding the temperature into the classifier does not scale this model's logits "
            "(its head is not linear); export it to ONNX and calibrate that instead"
        )
    return scaled, f"classifier weights / T ({', '.join(n for n, m in scaled.named_modules() if m in heads)})"


def _classifiers(model) -> list:
    """timm's get_classifier() (one head or a tuple of heads), else the last Linear layer."""
    import torch

    linear = (torch.nn.Linear, torch.nn.Conv2d)
    if hasattr(model, "get_classifier"):
        heads = model.get_classifier()
        heads = list(heads) if isinstance(heads, (tuple, list)) else [heads]
        return heads if all(isinstance(h, linear) for h in heads) else []
    last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1:]
    return last


def temperature_wrapper(model, temperature: float):
    """`model` followed by division by `temperature`, as a module that TorchScript can script."""
    import torch

    class TemperatureScaled(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module, t: float):
            super().__init__()
            self.inner = inner
            self.register_buffer("temperature", torch.tensor(float(t)))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x) / self.temperature

    return TemperatureScaled(model, temperature)


def write_calibrated(model: Path, predictor, temperature: float, out: Path) -> Path:
    """The calibrated model file in OUT, in the input's format family (ONNX stays ONNX), with its sidecar."""
    meta = predictor.config.as_metadata()
    calibration = {"temperature": temperature, "from": model.name, "from_sha256": predictor.info["sha256"]}
    if predictor.backend == "onnxruntime":
        path = out / f"{model.stem}.onnx"
        fold_temperature_onnx(model, path, temperature, meta, probabilities=predictor.output.kind == "probabilities")
        return path
    import torch

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
