"""The Predictor interface and `load_predictor`, which picks a backend by file type.

A Predictor takes float32 images in [0,1], (N, C, H, W), and returns float32 logits (N, K).
It owns its preprocessing (resize to the model's input size, mean/std) and turns declared or
detected probability outputs into log-probabilities, which softmax maps back to the same
probabilities, so every metric downstream can treat the output as logits.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from macs_audit.errors import InputError, UsageError
from macs_audit.models import config as model_config
from macs_audit.models.config import ModelConfig

ONNX_SUFFIXES = {".onnx"}
TORCH_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".torchscript", ".jit"}


class Predictor(Protocol):
    backend: str          # "onnxruntime" | "torch" (torch predictors also have a differentiable `forward`)
    device: str           # "cpu" | "cuda:N": where the model runs, and so where the views run
    config: ModelConfig
    output: OutputAdapter
    info: dict[str, Any]  # path, format, backend, device, provider, sha256: what the report records

    @property
    def num_classes(self) -> int | None: ...

    def predict(self, images: np.ndarray) -> np.ndarray: ...



def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cuda_available() -> bool:
    """True when a CUDA GPU is really present (onnxruntime-gpu lists CUDA even without one).

    On Linux without NVIDIA device files there is no GPU to find, so the answer comes without
    importing torch (about 4 s): the ONNX path on a CPU machine never pays for it."""
    import glob
    import sys

    if sys.platform.startswith("linux") and not glob.glob("/dev/nvidia[0-9]*") and not glob.glob("/dev/dxg"):
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda:0' when a GPU is present, else 'cpu'; validates explicit choices."""
    if device == "auto":
        return "cuda:0" if cuda_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not cuda_available():
            raise UsageError(f"--device {device} was requested but no CUDA GPU is available; use --device cpu or auto")
        return device if ":" in device else "cuda:0"
    raise UsageError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N")


class OutputAdapter:
    """Checks model outputs and converts probabilities to log-probabilities.

    output='auto' inspects the first batch: rows that are non-negative and sum to 1 are taken as
    probabilities (and recorded as detected), anything else as logits.
    """

    def __init__(self, declared: str, num_classes: int | None):
        self.kind = None if declared == "auto" else declared
        self.detected = False
        self.num_classes = num_classes

    def __call__(self, out: np.ndarray) -> np.ndarray:
        out = np.asarray(out)
        if out.ndim != 2:
            raise InputError(f"the model returned an output of shape {out.shape}; expected (batch, classes)")
        if self.num_classes is not None and out.shape[1] != self.num_classes:
            raise InputError(f"the model returned {out.shape[1]} outputs per image but {self.num_classes} classes were declared")
        if not np.isfinite(out).all():
            raise InputError("the model produced NaN or infinite outputs")
        if self.kind is None:
            looks_like_probs = out.min() >= 0 and np.allclose(out.sum(axis=1), 1.0, atol=1e-3)
            self.kind = "probabilities" if looks_like_probs else "logits"
            self.detected = True
        if self.kind == "probabilities":
            if out.min() < 0 or not np.allclose(out.sum(axis=1), 1.0, atol=1e-3):
                raise InputError("the model was declared to output probabilities but its rows do not sum to 1")
            return np.log(np.clip(out.astype(np.float64), 1e-300, None)).astype(np.float32)
        return out.astype(np.float32, copy=False)

    def describe(self) -> str:
        if self.kind is None:
            return "unknown (nothing evaluated)"
        return f"{self.kind} ({'detected' if self.detected else 'declared'})"



def load_predictor(path: str | Path, flags: dict[str, Any] | None = None, device: str = "auto",
                   allow_unsafe_pickle: bool = False) -> Predictor:
    """Open a model file with the right backend. `flags` are command-line overrides of ModelConfig keys."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"model not found: {path}")
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    sidecar = model_config.read_sidecar(path)
    device = resolve_device(device)
    suffix = path.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        from macs_audit.models.onnx import OnnxPredictor

        return OnnxPredictor(path, flags, sidecar, device)
    if suffix in TORCH_SUFFIXES:
        from macs_audit.models.torch import TorchPredictor

        return TorchPredictor(path, flags, sidecar, device, allow_unsafe_pickle)
    raise UsageError(f"unknown model type {path.suffix!r}; expected .onnx, .safetensors, .pt or .pth")


def load_torch_predictor(model: Path, flags: dict, device: str, trust_pickled: bool) -> Any:
    """A PyTorch model to train or export (a TorchPredictor); an ONNX file gets an error naming the checkpoint route."""
    if model.suffix.lower() in ONNX_SUFFIXES:
        raise UsageError(
            f"{model} is an ONNX model, which cannot be fine-tuned: fine-tune the PyTorch checkpoint it was "
            "exported from (.safetensors/.pt with --arch or a sidecar JSON), or fix it with "
            "`macs-audit calibrate`"
        )
    return load_predictor(model, flags, device=device, allow_unsafe_pickle=trust_pickled)
