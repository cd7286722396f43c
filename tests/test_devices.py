"""macs_audit.devices: the one CUDA detection and the --device rule (on CPU, the GPU's presence patched)."""

import glob
import sys

import pytest
import torch

from macs_audit import devices
from macs_audit.devices import cuda_available, resolve_device
from macs_audit.errors import UsageError


def _gpu(monkeypatch, present: bool):
    monkeypatch.setattr(devices, "cuda_available", lambda: present)


def test_resolve_device_without_gpu(monkeypatch):
    _gpu(monkeypatch, False)
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    for device in ("cuda", "cuda:0", "cuda:3"):
        with pytest.raises(UsageError, match="no CUDA GPU"):
            resolve_device(device)
    for bad in ("gpu", "cuda:", "cuda:x", "tpu"):
        with pytest.raises(UsageError, match="unknown device"):
            resolve_device(bad)


def test_resolve_device_with_gpu(monkeypatch):
    _gpu(monkeypatch, True)
    assert resolve_device("auto") == "cuda:0" and resolve_device("cuda") == "cuda:0"
    assert resolve_device("cuda:1") == "cuda:1" and resolve_device("cpu") == "cpu"


def test_cuda_available_asks_torch_only_where_a_gpu_could_be(monkeypatch):
    """On Linux without NVIDIA device files the answer is False without asking torch; with them, torch's."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    assert cuda_available() is False
    monkeypatch.setattr(glob, "glob", lambda pattern: ["/dev/nvidia0"] if "nvidia" in pattern else [])
    assert cuda_available() is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda_available() is False
    monkeypatch.setitem(sys.modules, "torch", None)  # torch not installed: no GPU to use
    assert cuda_available() is False
