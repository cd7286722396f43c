"""Reduced-precision builds of a float ONNX model, as a team ships them: FP16 (onnxruntime's own float16
converter, inputs and outputs kept float32) and INT8 (onnxruntime's static quantizer: QDQ format, per-channel
int8 weights, int8 activations whose ranges come from a stated number of class-stratified calibration images,
preprocessed as the model's predictor preprocesses them). The configuration `evaluate` reads (input size,
mean/std, classes, output kind) is written into the built model's metadata, so it needs no sidecar. Neither
path imports torch."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.atomic import atomic_path
from macs_audit.errors import InputError, UsageError
from macs_audit.models.backend import one_line
from macs_audit.models.config import encode_metadata
from macs_audit.models.preprocessing import resize_and_normalize
from macs_audit.pixels import to_unit_float

PRECISIONS = ("fp32", "fp16", "int8")
DEFAULT_CALIBRATION_IMAGES = 512
CALIBRATION_BATCH = 64
PRECISION_KEY = "macs_audit.precision"  # metadata: what the build is (the config keys are encode_metadata's)


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise UsageError(f"unknown --precision {precision!r}; choose from {', '.join(PRECISIONS)}")
    return precision


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


def _with_metadata(proto: Any, meta: dict[str, Any], precision: str) -> Any:
    del proto.metadata_props[:]
    for key, value in {**encode_metadata(meta), PRECISION_KEY: precision}.items():
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


def convert_int8(source: Path, target: Path, meta: dict[str, Any], batches: list[np.ndarray]) -> None:
    """`source` statically quantised (QDQ, per-channel int8 weights, int8 activations, MinMax ranges over the
    calibration `batches`, the model's inputs); InputError when the batches do not fit the model's input."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

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
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
            )
        except Exception as exc:  # onnxruntime's quantizer raises many types
            raise InputError(f"INT8 quantisation of {source} failed: {one_line(exc)}") from None
        proto = _with_metadata(onnx.load(str(tmp)), meta, "int8")
        onnx.save_model(proto, str(tmp), save_as_external_data=False)
        onnx.checker.check_model(str(tmp))
