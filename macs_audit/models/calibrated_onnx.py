"""A fitted calibrator written into an ONNX graph: its map appended after the model's first output as
standard operators, so the result is one ONNX file any runtime runs.

Temperature scaling divides the output (a Div node, in the output's type). Every other map computes, in
float64, exactly what its `transform` computes on the logits the predictor reads, and outputs the calibrated
log-probabilities as float32: vector scaling Mul + Add, matrix scaling MatMul + Add, Dirichlet calibration the
same on LogSoftmax, then LogSoftmax; isotonic regression and histogram binning look each class's probability
up in per-class tables (Greater/Less, ReduceSum, Gather), then floor, renormalise and Log. The lookup compares
each probability with its class's whole row, (batch, K, points) at once: for isotonic maps with many points
on many classes, a smaller batch keeps that small. The runtime's float64 exp and sums may differ from numpy's
in the last bit, so a probability exactly on a histogram bin edge (a fit sample on a quantile edge) can land
in the neighbouring bin; elsewhere the probabilities agree with the calibrator's to about 1e-7.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.atomic import atomic_path
from macs_audit.errors import InputError
from macs_audit.models.calibration_map import (
    CALIBRATION_METADATA_KEY,
    LINEAR_METHODS,
    TEMPERATURE_METADATA_KEY,
    Calibrator,
    calibration_record,
    check_method,
    fitted_temperature,
    linear_map,
    min_probability,
    one_vs_rest_tables,
)
from macs_audit.scores import PROBABILITY_FLOOR


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
    src,
    dst,
    calibrator: Calibrator,
    metadata: dict | None = None,
    probabilities: bool = False,
    record: dict | None = None,
) -> None:
    """Write `src` with `calibrator`'s map appended after its first output to `dst`, one file.

    Temperature scaling is `fold_temperature_onnx`. Every other map outputs float32 log-probabilities that
    softmax turns into the calibrated probabilities: the logits as the predictor reads them (float32; for a
    model that outputs probabilities, their log with the predictor's clip), then the map in float64 as the
    calibrator's `transform` computes it. Metadata as in `fold_temperature_onnx`, plus
    `macs_audit.calibration`: the JSON of `record` (default `calibration_record(calibrator)`)."""
    from onnx import TensorProto

    check_method(calibrator)
    properties = {CALIBRATION_METADATA_KEY: json.dumps(record or calibration_record(calibrator))}
    if calibrator.method == "temperature":
        properties[TEMPERATURE_METADATA_KEY] = repr(fitted_temperature(calibrator))
        divide = _temperature_nodes(fitted_temperature(calibrator), probabilities)
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


def _onnx_map(nodes: _Nodes, calibrator: Calibrator, z: str) -> str:
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
    q = nodes.op("Max", f, nodes.const(np.float64(min_probability(calibrator))))
    q = nodes.op("Div", q, nodes.reduce_sum(q, 1, 1))
    # The clip only acts where min_probability is 0: a finite log where the transform gives -inf.
    return nodes.op("Log", nodes.op("Max", q, nodes.const(np.float64(PROBABILITY_FLOOR))))
