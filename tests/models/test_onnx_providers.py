"""--provider (models/onnx.py): the providers an InferenceSession is asked for on each path, up to the session's
creation, with onnxruntime's provider list and session faked where the machine has no GPU (only the CPU path
runs here for real); what ran is recorded as the report's provider."""

import numpy as np
import onnxruntime as ort
import pytest
from conftest import linear_onnx

from macs_audit.errors import InputError, UsageError
from macs_audit.models import onnx as onnx_backend
from macs_audit.models.onnx import OnnxPredictor, check_provider, providers_for
from macs_audit.models.predictor import load_predictor

REAL_SESSION = ort.InferenceSession


class FakeSession:
    """An InferenceSession that records the providers asked for and reports the first as the one it runs on."""

    asked: list = []

    def __init__(self, path, sess_options=None, providers=None):
        self.real = REAL_SESSION(path, providers=["CPUExecutionProvider"])
        FakeSession.asked.append(providers)
        first = providers[0]
        self.provider = first[0] if isinstance(first, tuple) else first

    def get_providers(self):
        return [self.provider, "CPUExecutionProvider"]

    def __getattr__(self, name):
        return getattr(self.real, name)


@pytest.fixture
def fake_gpu_runtime(monkeypatch):
    FakeSession.asked = []
    monkeypatch.setattr(ort, "InferenceSession", FakeSession)
    monkeypatch.setattr(ort, "preload_dlls", lambda: None, raising=False)
    monkeypatch.setattr(
        ort,
        "get_available_providers",
        lambda: ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
    )
    return FakeSession


def test_provider_names():
    assert check_provider("CUDAExecutionProvider") == "cuda" and check_provider("TensorRT") == "tensorrt"
    assert check_provider(None) is None
    with pytest.raises(UsageError, match="unknown provider 'rocm'"):
        check_provider("rocm")


@pytest.mark.parametrize(
    "provider, expected",
    [
        ("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"]),
        ("tensorrt", ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]),
        (None, ["CUDAExecutionProvider", "CPUExecutionProvider"]),
        ("cpu", ["CPUExecutionProvider"]),
    ],
)
def test_each_provider_up_to_the_session(tmp_path, fake_gpu_runtime, provider, expected):
    model = OnnxPredictor(linear_onnx(tmp_path / "m.onnx"), {}, {}, "cuda:1", provider)
    [asked] = fake_gpu_runtime.asked
    assert [p[0] if isinstance(p, tuple) else p for p in asked] == expected
    gpu = [p for p in asked if isinstance(p, tuple)]
    assert all(options == {"device_id": 1} for _, options in gpu)
    assert model.info["provider"] == expected[0]
    assert model.info["device"] == ("cpu" if provider == "cpu" else "cuda:1")
    assert model.predict(np.zeros((2, 3, 32, 32), np.float32)).shape == (2, 10)


def test_providers_the_runtime_or_device_lacks(monkeypatch, tmp_path):
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(InputError, match="this onnxruntime has no TensorrtExecutionProvider"):
        providers_for("cuda:0", "tensorrt")
    with pytest.raises(UsageError, match="--provider cuda runs on a GPU: use --device cuda"):
        providers_for("cpu", "cuda")
    with pytest.raises(UsageError, match="is for ONNX models"):
        load_predictor(tmp_path / "m.safetensors", provider="cuda")


def test_a_session_that_falls_back_to_the_cpu_is_refused(tmp_path, monkeypatch):
    """onnxruntime-gpu without its CUDA libraries makes a session on the CPU: the audit must not claim CUDA."""
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(ort, "preload_dlls", lambda: None, raising=False)
    monkeypatch.setattr(ort, "InferenceSession", lambda path, sess_options=None, providers=None: REAL_SESSION(path))
    with pytest.raises(InputError, match="could not use CUDAExecutionProvider"):
        OnnxPredictor(linear_onnx(tmp_path / "m.onnx"), {}, {}, "cuda:0", "cuda")


def test_the_cpu_provider_for_real(tmp_path):
    model = load_predictor(linear_onnx(tmp_path / "m.onnx"), device="cpu", provider="cpu")
    assert model.info["provider"] == "CPUExecutionProvider"
    assert onnx_backend.PROVIDERS["cpu"] == model.session.get_providers()[0]
