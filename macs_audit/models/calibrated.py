"""Writing a model with a fitted post-hoc calibrator applied, so the calibrated model is an ordinary model file.

The calibrator is any fitted one of `macs_audit.calibrators` (the protocol of calibrators/base.py: `method`,
`n_classes`, `fit_size`, `describe()`, and the fitted numbers of its method); this layer reads its fields and
never imports the calibrators.

- ONNX: the calibrator's map is appended to the graph after the model's output as standard operators, so
  the result is one ONNX file any runtime runs. Temperature scaling divides the output (a Div node, in the
  output's type). Every other map computes, in float64, exactly what its `transform` computes on the logits
  the predictor reads, and outputs the calibrated log-probabilities as float32: vector scaling Mul + Add,
  matrix scaling MatMul + Add, Dirichlet calibration the same on LogSoftmax, then LogSoftmax; isotonic
  regression and histogram binning look each class's probability up in per-class tables (Greater/Less,
  ReduceSum, Gather), then floor, renormalise and Log. The lookup compares each probability with its
  class's whole row, (batch, K, points) at once: for isotonic maps with many points on many classes, a
  smaller batch keeps that small. The runtime's float64 exp and sums may differ from numpy's in the last
  bit, so a probability exactly on a histogram bin edge (a fit sample on a quantile edge) can land in the
  neighbouring bin; elsewhere the probabilities agree with the calibrator's to about 1e-7.
- torch: temperature, vector and matrix scaling fold into the classifier's weights and bias, so the model
  keeps its architecture and state-dict keys. The others (and any map on a TorchScript input, a model that
  outputs probabilities, or a bias-free head where the map has intercepts) become a TorchScript wrapper:
  the model, then the map in float64.

The method, its summary and the fit data go into the model's metadata (ONNX `macs_audit.calibration`) or
its sidecar (`calibration`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.atomic import atomic_path
from macs_audit.errors import InputError
from macs_audit.models.export import save_safetensors, write_sidecar

TEMPERATURE_METADATA_KEY = "macs_audit.temperature"  # informational; loaders ignore unknown keys
CALIBRATION_METADATA_KEY = "macs_audit.calibration"  # JSON: calibration_record()
PROBABILITY_FLOOR = 1e-300  # the clip under the log where the predictor reads probabilities (models/backend.py)
LINEAR_METHODS = ("temperature", "vector", "matrix", "dirichlet")
ONE_VS_REST_METHODS = ("isotonic", "histogram")
FOLDABLE_METHODS = ("temperature", "vector", "matrix")  # maps of the logits that a linear head can absorb


def calibration_record(calibrator: Any, fit_data: dict | None = None) -> dict[str, Any]:
    """What the model's metadata records: `describe()` (method, n_classes, fit_size, n_parameters, and the
    options and fit results that are single values; the fitted arrays are in the model itself) and `fit_data`."""
    record = calibrator.describe()
    record["parameters"] = {k: v for k, v in record["parameters"].items() if np.ndim(v) == 0}
    if fit_data is not None:
        record["fit_data"] = fit_data
    return record


def linear_map(calibrator: Any) -> tuple[np.ndarray, np.ndarray, bool]:
    """(W, b, on log-probabilities) of a linear calibrator, whose calibrated logits are W z + b: W is (K, K), or a
    per-class scale (K,) meaning z * W + b; Dirichlet calibration applies it to log_softmax(z) instead of z."""
    method = calibrator.method
    if method == "temperature":
        k = calibrator.n_classes
        return np.full(k, 1.0 / calibrator.temperature), np.zeros(k), False
    if method == "vector":
        return np.asarray(calibrator.scale, np.float64), np.asarray(calibrator.bias, np.float64), False
    if method in ("matrix", "dirichlet"):
        weights, bias = np.asarray(calibrator.weights, np.float64), np.asarray(calibrator.bias, np.float64)
        return weights, bias, method == "dirichlet"
    raise InputError(f"{method} calibration is not a linear map of the logits")


def one_vs_rest_tables(calibrator: Any) -> tuple[np.ndarray, np.ndarray, bool]:
    """(x, v, interpolate): per-class tables (K, T), float64, for isotonic regression and histogram binning.

    Isotonic (interpolate=True): class k's map is numpy.interp(p, x[k], v[k]). The points are padded so that
    every p in [0, 1] lies between two of them: -1 in front with the first value and 2, 3, ... behind with
    the last, so the constant ends (numpy.interp's clip) are slope-0 segments and the rows share a length.
    Histogram (interpolate=False): x[k] holds the inner edges plus a 2 that no p passes, and the bin of p
    is the number of x[k] below p (bins are (lo, hi]); v[k] the bin values."""
    method = calibrator.method
    if method == "isotonic":
        width = max(len(t) for t in calibrator.thresholds) + 2
        x, v = np.empty((calibrator.n_classes, width)), np.empty((calibrator.n_classes, width))
        for k, (xs, vs) in enumerate(zip(calibrator.thresholds, calibrator.values, strict=True)):
            pad = width - 1 - len(xs)
            x[k] = np.concatenate([[-1.0], xs, 2.0 + np.arange(pad)])
            v[k] = np.concatenate([[vs[0]], vs, np.full(pad, vs[-1])])
        return x, v, True
    if method == "histogram":
        edges = np.asarray(calibrator.edges, np.float64)
        x = np.concatenate([edges[:, 1:-1], np.full((len(edges), 1), 2.0)], axis=1)
        return x, np.asarray(calibrator.values, np.float64), False
    raise InputError(f"{method} calibration is not a one-vs-rest map")


def _check_method(calibrator: Any) -> None:
    if calibrator.method not in LINEAR_METHODS + ONE_VS_REST_METHODS:
        raise InputError(f"cannot write a model calibrated with {calibrator.method!r}")
    if calibrator.method == "temperature" and not calibrator.temperature > 0:
        raise InputError(f"the temperature must be positive, got {calibrator.temperature}")


# ----------------------------------------------------------------------------------------------------- ONNX


def _rewrite_onnx(
    src: str | Path,
    dst: str | Path,
    stage: str,
    append: Callable[[Any, str], None],
    metadata: dict | None,
    probabilities: bool,
    properties: dict[str, str],
) -> None:
    """Write `src` to `dst` (one file, atomically) with its first output renamed to OUTPUT_before_`stage` and
    recomputed by `append(proto, raw)` from that renamed tensor `raw`. Metadata properties are kept;
    `metadata` (ModelConfig keys) and then `properties` are written over them, so the file carries its own
    preprocessing."""
    import onnx

    from macs_audit.models.backend import one_line
    from macs_audit.models.config import encode_metadata

    try:
        proto = onnx.load(str(src))
    except Exception as exc:
        raise InputError(f"cannot read ONNX model {src}: {one_line(exc)}") from None
    graph = proto.graph
    out = graph.output[0]
    raw = f"{out.name}_before_{stage}"
    # Rename the output wherever it is produced or used, then compute the real output from it.
    for node in graph.node:
        node.output[:] = [raw if name == out.name else name for name in node.output]
        node.input[:] = [raw if name == out.name else name for name in node.input]
    append(proto, raw)
    meta = dict(metadata or {})
    if probabilities:
        meta["output"] = "logits"
    props = {p.key: p.value for p in proto.metadata_props}  # keep the others, in order
    props.update(encode_metadata(meta))
    props.update(properties)
    del proto.metadata_props[:]
    for key, value in props.items():
        proto.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(proto)
    with atomic_path(dst) as tmp:
        onnx.save_model(proto, str(tmp), save_as_external_data=False)


def fold_temperature_onnx(
    src, dst, temperature: float, metadata: dict | None = None, probabilities: bool = False
) -> None:
    """Write `src` with its first output divided by `temperature` (a Div node) to `dst`, one file.

    Metadata properties are kept; `metadata` (ModelConfig keys) is written over them so the file
    carries its own preprocessing. A model that outputs probabilities gets Log before the Div, and
    then outputs logits (declared in the metadata).
    """
    if not temperature > 0:
        raise InputError(f"the temperature must be positive, got {temperature}")
    append = _temperature_nodes(temperature, probabilities)
    properties = {TEMPERATURE_METADATA_KEY: repr(float(temperature))}
    _rewrite_onnx(src, dst, "temperature", append, metadata, probabilities, properties)


def _temperature_nodes(temperature: float, probabilities: bool) -> Callable[[Any, str], None]:
    def append(proto: Any, raw: str) -> None:
        import onnx
        from onnx import helper, numpy_helper

        graph = proto.graph
        out = graph.output[0]
        elem = out.type.tensor_type.elem_type
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

    return append


class _Nodes:
    """Nodes and constants appended to a graph, each named `prefix` + a counter so no name collides."""

    def __init__(self, graph: Any, prefix: str, opset: int):
        from onnx import helper, numpy_helper

        self.helper, self.numpy_helper = helper, numpy_helper
        self.graph, self.prefix, self.opset, self.count = graph, prefix, opset, 0

    def _name(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"

    def const(self, value: Any) -> str:
        name = self._name()
        self.graph.initializer.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, *inputs: str, output: str | None = None, **attributes: Any) -> str:
        name = output or self._name()
        self.graph.node.append(self.helper.make_node(op_type, list(inputs), [name], name=name, **attributes))
        return name

    def reduce_sum(self, x: str, axis: int, keepdims: int) -> str:
        if self.opset < 13:  # axes became an input in opset 13
            return self.op("ReduceSum", x, axes=[axis], keepdims=keepdims)
        return self.op("ReduceSum", x, self.const(np.array([axis], np.int64)), keepdims=keepdims)


def fold_calibrator_onnx(
    src, dst, calibrator: Any, metadata: dict | None = None, probabilities: bool = False, record: dict | None = None
) -> None:
    """Write `src` with `calibrator`'s map appended after its first output to `dst`, one file.

    Temperature scaling is `fold_temperature_onnx`. Every other map outputs float32 log-probabilities that
    softmax turns into the calibrated probabilities: the logits as the predictor reads them (float32; for a
    model that outputs probabilities, their log with the predictor's clip), then the map in float64 as the
    calibrator's `transform` computes it. Metadata as in `fold_temperature_onnx`, plus
    `macs_audit.calibration`: the JSON of `record` (default `calibration_record(calibrator)`)."""
    from onnx import TensorProto

    _check_method(calibrator)
    properties = {CALIBRATION_METADATA_KEY: json.dumps(record or calibration_record(calibrator))}
    if calibrator.method == "temperature":
        properties[TEMPERATURE_METADATA_KEY] = repr(float(calibrator.temperature))
        divide = _temperature_nodes(calibrator.temperature, probabilities)
        _rewrite_onnx(src, dst, "temperature", divide, metadata, probabilities, properties)
        return

    def append(proto: Any, raw: str) -> None:
        out = proto.graph.output[0]
        opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)
        nodes = _Nodes(proto.graph, f"{out.name}_{calibrator.method}_", opset)
        z = raw
        if probabilities:  # log(max(p, floor)) in float64, as models/backend.py reads probabilities
            floor = nodes.const(np.float64(PROBABILITY_FLOOR))
            z = nodes.op("Log", nodes.op("Max", nodes.op("Cast", z, to=TensorProto.DOUBLE), floor))
        if probabilities or out.type.tensor_type.elem_type != TensorProto.FLOAT:
            z = nodes.op("Cast", z, to=TensorProto.FLOAT)  # the predictor's logits are float32
        log_q = _onnx_map(nodes, calibrator, nodes.op("Cast", z, to=TensorProto.DOUBLE))
        nodes.op("Cast", log_q, to=TensorProto.FLOAT, output=out.name)
        out.type.tensor_type.elem_type = TensorProto.FLOAT

    _rewrite_onnx(src, dst, "calibration", append, metadata, probabilities, properties)


def _onnx_map(nodes: _Nodes, calibrator: Any, z: str) -> str:
    """Append `calibrator`'s transform of the float64 logits `z`; return its float64 log-probabilities."""
    from onnx import TensorProto

    if calibrator.method in LINEAR_METHODS:
        weights, bias, on_log_probabilities = linear_map(calibrator)
        if on_log_probabilities:
            z = nodes.op("LogSoftmax", z, axis=1)
        if weights.ndim == 1:
            z = nodes.op("Mul", z, nodes.const(weights))
        else:
            z = nodes.op("MatMul", z, nodes.const(weights.T))
        return nodes.op("LogSoftmax", nodes.op("Add", z, nodes.const(bias)), axis=1)
    x, v, interpolate = one_vs_rest_tables(calibrator)
    k, width = x.shape
    p = nodes.op("Softmax", z, axis=1)
    column = nodes.op("Reshape", p, nodes.const(np.array([-1, k, 1], np.int64)))  # (N, K, 1) against (K, T)
    offsets = nodes.const(np.arange(k, dtype=np.int64) * width)  # row k of a table starts at k * T, flattened
    v_flat = nodes.const(v.ravel())
    if interpolate:  # numpy.interp: v[j] + (v[j+1] - v[j]) / (x[j+1] - x[j]) * (p - x[j]), x[j] <= p < x[j+1]
        above = nodes.op("Cast", nodes.op("Greater", nodes.const(x), column), to=TensorProto.INT64)
        last = nodes.op("Sub", nodes.const(np.int64(width - 1)), nodes.reduce_sum(above, 2, 0))
        j = nodes.op("Add", last, offsets)
        j1 = nodes.op("Add", j, nodes.const(np.int64(1)))
        x_flat = nodes.const(x.ravel())
        x0, x1 = nodes.op("Gather", x_flat, j), nodes.op("Gather", x_flat, j1)
        v0, v1 = nodes.op("Gather", v_flat, j), nodes.op("Gather", v_flat, j1)
        slope = nodes.op("Div", nodes.op("Sub", v1, v0), nodes.op("Sub", x1, x0))
        f = nodes.op("Add", nodes.op("Mul", slope, nodes.op("Sub", p, x0)), v0)
    else:  # the bin is the number of inner edges below p
        below = nodes.op("Cast", nodes.op("Less", nodes.const(x), column), to=TensorProto.INT64)
        f = nodes.op("Gather", v_flat, nodes.op("Add", nodes.reduce_sum(below, 2, 0), offsets))
    q = nodes.op("Max", f, nodes.const(np.float64(calibrator.options["min_probability"])))
    q = nodes.op("Div", q, nodes.reduce_sum(q, 1, 1))
    # The clip only acts where min_probability is 0: a finite log where the transform gives -inf.
    return nodes.op("Log", nodes.op("Max", q, nodes.const(np.float64(PROBABILITY_FLOOR))))


# ---------------------------------------------------------------------------------------------------- torch


def _fold_into_classifier(model, example, edit: Callable[[Any], None], expected: Callable[[Any], Any], what: str):
    """A copy of `model` with `edit(head)` applied to each classifier head, checked on `example` inputs to
    give `expected(logits)`; raises InputError (with the ONNX route) when there is no linear head or the
    edit does not give the expected logits. Returns (model, where it was folded)."""
    import copy

    import torch

    was_training = model.training
    model.eval()
    scaled = copy.deepcopy(model).eval()
    heads = _classifiers(scaled)
    if not heads:
        raise InputError(
            f"cannot find a linear classifier to fold the {what} into; "
            "export the model to ONNX and calibrate that instead"
        )
    for h in heads:
        with torch.no_grad():
            edit(h)
    with torch.no_grad():
        want = expected(model(example).float())
        got = scaled(example).float()
    model.train(was_training)
    if not torch.allclose(got, want, rtol=1e-4, atol=1e-5 * float(want.abs().max().clamp_min(1))):
        raise InputError(
            f"folding the {what} into the classifier does not give this model's calibrated logits "
            "(its head is not linear); export it to ONNX and calibrate that instead"
        )
    return scaled, ", ".join(n for n, m in scaled.named_modules() if m in heads)


def fold_temperature_torch(model, temperature: float, example):
    """Return a copy of `model` whose logits are divided by `temperature`, and where it was folded.

    Folded into the classifier (timm's `get_classifier()`: weight and bias divided by T), so the
    calibrated model is the same architecture and loads from safetensors with no special key.
    Checked on `example` inputs; if the head is not linear in its weights, raises InputError.
    """
    if not temperature > 0:
        raise InputError(f"the temperature must be positive, got {temperature}")

    def divide(h: Any) -> None:
        h.weight.div_(temperature)
        if h.bias is not None:
            h.bias.div_(temperature)

    scaled, heads = _fold_into_classifier(model, example, divide, lambda z: z / temperature, "temperature")
    return scaled, f"classifier weights / T ({heads})"


def fold_linear_torch(model, weights: np.ndarray, bias: np.ndarray, example):
    """Return a copy of `model` whose logits z become W z + b (`weights` W (K, K), or a per-class scale (K,)
    meaning z * W + b), and where it was folded: head weight W_h -> W W_h, bias b_h -> W b_h + b (timm's
    `get_classifier()`, Linear or Conv2d). A head without a bias takes only b = 0. Checked on `example`
    inputs like `fold_temperature_torch`."""
    import torch

    matrix = np.diag(weights) if weights.ndim == 1 else weights
    m, c = torch.from_numpy(matrix), torch.from_numpy(bias)

    def apply(h: Any) -> None:
        if h.bias is None and np.any(bias):
            raise InputError("the classifier has no bias to hold the calibration's intercepts")
        w = h.weight.detach().double()
        h.weight.copy_((m @ w.reshape(len(w), -1)).reshape(w.shape))
        if h.bias is not None:
            h.bias.copy_(m @ h.bias.detach().double() + c)

    def expected(z: Any) -> Any:
        return (z.double() @ m.T + c).float()

    scaled, heads = _fold_into_classifier(model, example, apply, expected, "calibration map")
    return scaled, f"classifier weights and bias ({heads})"


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


def _foldable(model, calibrator: Any) -> bool:
    """Whether `calibrator` can fold into `model`'s classifier: a map of the logits, and a bias to hold its
    intercepts (a head without one would need a new state-dict key, which the architecture does not load)."""
    if calibrator.method not in FOLDABLE_METHODS:
        return False
    _, bias, _ = linear_map(calibrator)
    return not np.any(bias) or all(h.bias is not None for h in _classifiers(model))


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


def calibration_wrapper(model, calibrator: Any, probabilities: bool = False):
    """`model` followed by `calibrator`'s map, as a module that TorchScript can script.

    It outputs float32 log-probabilities: the logits as the predictor reads them (float32; for a model that
    outputs probabilities, `probabilities=True`, their log with the predictor's clip), then the map in
    float64 as the calibrator's `transform` computes it, on the tables the ONNX graph uses."""
    import torch

    _check_method(calibrator)
    if calibrator.method in LINEAR_METHODS:
        weights, bias, on_log_probabilities = linear_map(calibrator)
        kind = "log-affine" if on_log_probabilities else "affine"
        tables, floor = (weights, bias), 0.0
    else:
        x, v, interpolate = one_vs_rest_tables(calibrator)
        kind = "interpolate" if interpolate else "bins"
        tables, floor = (x, v), float(calibrator.options["min_probability"])

    class Calibrated(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module):
            super().__init__()
            self.inner = inner
            self.kind = kind  # affine | log-affine | interpolate | bins
            self.probabilities = probabilities
            self.floor = floor
            self.clip = PROBABILITY_FLOOR  # TorchScript reads a float from an attribute, not a global
            # Fixed parameters rather than buffers: typed as tensors, and moved with the model all the same.
            self.a = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(tables[0])), requires_grad=False)
            self.b = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(tables[1])), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            z = self.inner(x).float()
            if self.probabilities:
                z = torch.log(z.double().clamp_min(self.clip)).float()
            z = z.double()
            if self.kind == "affine" or self.kind == "log-affine":
                if self.kind == "log-affine":
                    z = torch.log_softmax(z, 1)
                z = z * self.a if self.a.dim() == 1 else z @ self.a.T
                return torch.log_softmax(z + self.b, 1).float()
            p = torch.softmax(z, 1).T.contiguous()  # (K, N): each class against its own table row
            if self.kind == "interpolate":
                j = torch.searchsorted(self.a, p, right=True) - 1  # the last point <= p
                x0, x1 = self.a.gather(1, j), self.a.gather(1, j + 1)
                v0, v1 = self.b.gather(1, j), self.b.gather(1, j + 1)
                f = (v1 - v0) / (x1 - x0) * (p - x0) + v0
            else:
                f = self.b.gather(1, torch.searchsorted(self.a, p))  # the number of inner edges below p
            q = f.T.clamp_min(self.floor)
            q = q / q.sum(1, keepdim=True)
            return torch.log(q.clamp_min(self.clip)).float()

    return Calibrated(model)


def _wrapper_description(calibrator: Any) -> str:
    if calibrator.method in LINEAR_METHODS:
        return f"TorchScript wrapper (the model, then {calibrator.method} scaling of its logits)"
    return f"TorchScript wrapper (the model, then {calibrator.method} calibration of its softmax)"


def write_calibrated(model: Path, predictor, calibrator: Any, out: Path, fit_data: dict | None = None) -> Path:
    """The calibrated model file in OUT, in the input's format family (ONNX stays ONNX), with its sidecar.

    `calibrator` is any fitted calibrator; `fit_data` (a small JSON-ready dict: source, n, ...) goes into the
    metadata with the calibrator's summary. ONNX: `fold_calibrator_onnx`. torch: folded into the classifier
    where the map allows it (`_foldable`), written as safetensors (or the pickled module it came as); else a
    TorchScript wrapper (`.pt`). The sidecar's `calibration.folded_into` says which."""
    _check_method(calibrator)
    if predictor.num_classes is not None and predictor.num_classes != calibrator.n_classes:
        raise InputError(
            f"the calibrator was fitted on {calibrator.n_classes} classes but {model} has {predictor.num_classes}"
        )
    meta = predictor.config.as_metadata()
    calibration = calibration_record(calibrator, fit_data)
    calibration.update({"from": model.name, "from_sha256": predictor.info["sha256"]})
    if calibrator.method == "temperature":
        calibration["temperature"] = calibrator.temperature  # the key readers of a temperature sidecar know
    probabilities = predictor.output.kind == "probabilities"
    if predictor.backend == "onnxruntime":
        path = out / f"{model.stem}.onnx"
        fold_calibrator_onnx(model, path, calibrator, meta, probabilities=probabilities, record=calibration)
        return path
    import torch

    from macs_audit.models.backend import library_warnings, one_line

    net = predictor.model.cpu().eval()
    fmt = predictor.info["format"]
    if fmt == "torchscript" and calibrator.method == "temperature" and not probabilities:
        path = out / f"{model.stem}.pt"  # no Python head to edit: script a wrapper that divides
        with atomic_path(path) as tmp, library_warnings(False):
            torch.jit.save(torch.jit.script(temperature_wrapper(net, calibrator.temperature)), str(tmp))
        calibration["folded_into"] = "TorchScript wrapper (logits / T)"
    elif fmt != "torchscript" and not probabilities and _foldable(net, calibrator):
        example = torch.randn(4, len(meta["mean"]), *meta["input_size"], generator=torch.Generator().manual_seed(0))
        if calibrator.method == "temperature":
            scaled, where = fold_temperature_torch(net, calibrator.temperature, example)
        else:
            scaled, where = fold_linear_torch(net, *linear_map(calibrator)[:2], example)
        calibration["folded_into"] = where
        if fmt == "pickled-module":
            path = out / f"{model.stem}.pt"
            with atomic_path(path) as tmp:
                torch.save(scaled, str(tmp))
        else:
            path = out / f"{model.stem}.safetensors"
            save_safetensors(scaled, path)
    else:  # the map does not fold into a linear head: script the model and the map together
        path = out / f"{model.stem}.pt"
        with library_warnings(False):
            try:
                scripted = torch.jit.script(calibration_wrapper(net, calibrator, probabilities))
            except Exception as exc:  # TorchScript rejects many Python constructs, each with its own error
                raise InputError(
                    f"cannot script {model.name} with its {calibrator.method} calibration for TorchScript "
                    f"({one_line(exc, 160)}); export the model to ONNX and calibrate that instead"
                ) from None
            with atomic_path(path) as tmp:
                torch.jit.save(scripted, str(tmp))
        calibration["folded_into"] = _wrapper_description(calibrator)
        if probabilities:
            meta["output"] = "logits"
    write_sidecar(path.with_suffix(".json"), {**meta, "calibration": calibration})
    return path
