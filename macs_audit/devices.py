"""Where a model runs: detecting a CUDA GPU (once, for every path) and the `--device auto|cpu|cuda[:N]` rule."""

from __future__ import annotations

import glob
import sys

from macs_audit.errors import UsageError


def cuda_available() -> bool:
    """True when a CUDA GPU is really present (onnxruntime-gpu lists CUDA even without one).

    On Linux without NVIDIA device files there is no GPU to find, so the answer comes without
    importing torch (about 4 s): the ONNX path on a CPU machine never pays for it."""
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
