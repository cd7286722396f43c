"""Reduced-precision builds of a float ONNX model, as a team ships them: FP16 (onnxruntime's own float16
converter, inputs and outputs kept float32) and INT8 (onnxruntime's static quantizer: QDQ format, per-channel
int8 weights, activations whose ranges come from a stated number of class-stratified calibration images,
preprocessed as the model's predictor preprocesses them; the activation type and weight range those of the
hardware the build is for, `INT8_TARGETS`). The configuration `evaluate` reads (input size, mean/std, classes,
output kind) is written into the built model's metadata, so it needs no sidecar. Neither path imports torch."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.atomic import atomic_path
from macs_audit.errors import InputError, UsageError
from macs_audit.models.backend import one_line
from macs_audit.models.config import encode_metadata
from macs_audit.models.onnx import GPU_PROVIDERS
from macs_audit.models.preprocessing import resize_and_normalize
from macs_audit.pixels import to_unit_float
from macs_audit.text import or_list

PRECISIONS = ("fp32", "fp16", "int8")
DEFAULT_CALIBRATION_IMAGES = 512
CALIBRATION_BATCH = 64
PRECISION_KEY = "macs_audit.precision"  # metadata: what the build is (the config keys are encode_metadata's)
INT8_TARGET_KEY = "macs_audit.int8_target"  # metadata: the hardware an INT8 build is for (INT8_TARGETS)


@dataclasses.dataclass(frozen=True)
class Int8Target:
    """How an INT8 build for one kind of hardware is quantised: onnxruntime's own advice in quantize_static's
    docstring ("Choosing parameters for CPU inference", and symmetric int8 for GPU/TensorRT)."""

    description: str
    uint8_activations: bool  # uint8 activations (asymmetric), else symmetric int8 ones (zero points of 0)
    reduce_range: bool  # 7-bit weights


# x86-64 CPUs without VNNI (AVX2, and AVX-512 before VNNI) multiply uint8 by int8 with VPMADDUBSW, whose 16-bit sums
# of two products saturate on 8-bit weights; 7-bit weights keep every sum in range, on every x86-64 CPU, hence the
# CPU default (measured in benchmarks/RESULTS.md, "INT8 builds for each --int8-target").
INT8_TARGETS = {
    "x86": Int8Target(
        "for x86-64 CPUs, uint8 activations and 7-bit weights",
        uint8_activations=True,
        reduce_range=True,
    ),
    "x86-vnni": Int8Target(
        "for x86-64 CPUs with VNNI only, uint8 activations and 8-bit weights",
        uint8_activations=True,
        reduce_range=False,
    ),
    "arm": Int8Target(
        "for ARM CPUs, symmetric int8 activations and 8-bit weights",
        uint8_activations=False,
        reduce_range=False,
    ),
    "gpu": Int8Target(
        "for CUDA and TensorRT, symmetric int8 activations and 8-bit weights",
        uint8_activations=False,
        reduce_range=False,
    ),
}
CPU_INT8_TARGET = "x86"  # the default, except with a GPU provider
GPU_INT8_TARGET = "gpu"


def default_int8_target(provider: str | None) -> str:
    """The hardware an INT8 build is for when none is named: the GPU where it is audited on a GPU provider (a
    models.onnx.PROVIDERS key), else x86-64 CPUs."""
    return GPU_INT8_TARGET if provider in GPU_PROVIDERS else CPU_INT8_TARGET


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise UsageError(f"unknown --precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    return precision


def check_int8_target(target: str) -> str:
    if target not in INT8_TARGETS:
        raise UsageError(f"unknown --int8-target {target!r}; choose from {or_list(INT8_TARGETS)}")
    return target


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """The quantizer's advice ("consider pre-processing") goes to the root logger: kept off the terminal."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _with_metadata(proto: Any, meta: dict[str, Any], precision: str, int8_target: str | None = None) -> Any:
    del proto.metadata_props[:]
    build = {PRECISION_KEY: precision, **({INT8_TARGET_KEY: int8_target} if int8_target else {})}
    for key, value in {**encode_metadata(meta), **build}.items():
        proto.metadata_props.add(key=key, value=value)
    proto.producer_name = "macs-audit"
    return proto


def topologically_sorted(graph: Any) -> None:
    """Reorder `graph`'s nodes so that each comes after the nodes it reads from, as the ONNX checker requires (the
    float16 converter appends the casts of the kept float32 inputs after the nodes that read them)."""
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(name in available for name in n.input)]
        if not ready:
            raise InputError("the converted graph has a cycle or an input no node produces")
        for node in ready:
            available.update(node.output)
        ordered += ready
        pending = [n for n in pending if all(n is not r for r in ready)]
    copies = [type(n)() for n in ordered]
    for copy, node in zip(copies, ordered, strict=True):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)


def _save(proto: Any, path: Path) -> None:
    import onnx

    with atomic_path(path) as tmp:
        onnx.save_model(proto, str(tmp), save_as_external_data=False)
        onnx.checker.check_model(str(tmp))


def convert_fp16(source: Path, target: Path, meta: dict[str, Any]) -> None:
    """`source` with its weights and activations in float16, inputs and outputs float32 (keep_io_types)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    try:
        proto = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    except Exception as exc:  # the converter raises what onnx raises
        raise InputError(f"FP16 conversion of {source} failed: {one_line(exc)}") from None
    topologically_sorted(proto.graph)
    _save(_with_metadata(proto, meta, "fp16"), target)


def calibration_batches(images: np.ndarray, config: Any) -> list[np.ndarray]:
    """uint8 images (N, H, W, C) as the model's float32 inputs (N, C, H, W), resized and normalised as its
    predictor does, in batches of CALIBRATION_BATCH. InputError when their channels are not the model's."""
    channels = len(config.mean)
    if images.ndim != 4 or images.shape[-1] != channels:
        shape = "x".join(map(str, images.shape[1:]))
        raise InputError(
            f"the calibration images are {shape} (H x W x C) but the model takes {channels}-channel images: "
            "calibrate on data like the data it is evaluated on"
        )
    out = []
    for start in range(0, len(images), CALIBRATION_BATCH):
        x = to_unit_float(images[start : start + CALIBRATION_BATCH])
        out.append(np.ascontiguousarray(resize_and_normalize(x, config.input_size, config.mean, config.std)))
    return out


def convert_int8(
    source: Path, target: Path, meta: dict[str, Any], batches: list[np.ndarray], int8_target: str = CPU_INT8_TARGET
) -> None:
    """`source` statically quantised for the hardware `int8_target` names (INT8_TARGETS: QDQ, per-channel int8
    weights, the target's activation type and weight range, MinMax ranges over the calibration `batches`, the
    model's inputs); InputError when the batches do not fit the model's input."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    settings = INT8_TARGETS[check_int8_target(int8_target)]
    session = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    (model_input,) = session.get_inputs()
    expected = model_input.shape[1:]
    for batch in batches[:1]:
        fixed = [d for d in expected if isinstance(d, int)]
        if len(batch.shape[1:]) != len(expected) or any(
            isinstance(d, int) and d != b for d, b in zip(expected, batch.shape[1:], strict=True)
        ):
            got = "x".join(map(str, batch.shape[1:]))
            raise InputError(f"the calibration inputs are {got} but {source} takes {'x'.join(map(str, fixed))}")

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.batches = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self.batches, None)
            return None if batch is None else {model_input.name: batch}

    with atomic_path(target) as tmp, _quiet_libraries():
        try:
            quantize_static(
                str(source),
                str(tmp),
                Reader(),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QUInt8 if settings.uint8_activations else QuantType.QInt8,
                weight_type=QuantType.QInt8,
                reduce_range=settings.reduce_range,
                extra_options={"ActivationSymmetric": not settings.uint8_activations},
            )
        except Exception as exc:  # onnxruntime's quantizer raises many types
            raise InputError(f"INT8 quantisation of {source} failed: {one_line(exc)}") from None
        proto = _with_metadata(onnx.load(str(tmp)), meta, "int8", int8_target)
        onnx.save_model(proto, str(tmp), save_as_external_data=False)
        onnx.checker.check_model(str(tmp))
