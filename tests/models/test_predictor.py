"""models/predictor.py: load_predictor picks the backend by the file's type, layers flags over the sidecar, and
refuses what it cannot open with one line that says what to do; both backends offer the Predictor interface."""

import json

import numpy as np
import pytest
import torch
from calibration_helpers import TinyNet, scripted
from conftest import linear_onnx

from macs_audit.errors import InputError, UsageError
from macs_audit.models.onnx import OnnxPredictor
from macs_audit.models.predictor import ONNX_SUFFIXES, TORCH_SUFFIXES, load_predictor, load_torch_predictor
from macs_audit.models.torch import TorchPredictor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_suffix_picks_the_backend(tmp_path):
    onnx_predictor = load_predictor(linear_onnx(tmp_path / "m.onnx", size=8), device="cpu")
    torch_predictor = load_predictor(scripted(tmp_path, TinyNet()), device="cpu")
    assert isinstance(onnx_predictor, OnnxPredictor) and onnx_predictor.backend == "onnxruntime"
    assert isinstance(torch_predictor, TorchPredictor) and torch_predictor.backend == "torch"
    x = np.random.default_rng(0).random((2, 3, 8, 8), dtype=np.float32)
    for predictor in (onnx_predictor, torch_predictor):  # the Predictor interface, on either backend
        assert predictor.device == "cpu" and predictor.config.input_size == (8, 8)
        logits = predictor.predict(x)
        assert logits.shape == (2, predictor.num_classes) and logits.dtype == np.float32
        assert {"path", "format", "backend", "device", "sha256"} <= set(predictor.info)
    assert ".onnx" in ONNX_SUFFIXES and {".pt", ".safetensors"} <= TORCH_SUFFIXES


def test_flags_win_over_the_sidecar_and_unset_flags_do_not_count(tmp_path):
    path = linear_onnx(tmp_path / "m.onnx", size=8)
    (tmp_path / "m.json").write_text(json.dumps({"mean": [0.1, 0.2, 0.3], "std": [0.5, 0.5, 0.5]}))
    predictor = load_predictor(path, {"mean": [0.4, 0.4, 0.4], "std": None}, device="cpu")
    assert predictor.config.mean == (0.4, 0.4, 0.4) and predictor.config.sources["mean"] == "flag"
    assert predictor.config.std == (0.5, 0.5, 0.5) and predictor.config.sources["std"] == "sidecar"


def test_what_cannot_be_opened_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(InputError, match="model not found"):
        load_predictor(tmp_path / "missing.onnx", device="cpu")
    (tmp_path / "m.h5").write_bytes(b"keras")
    with pytest.raises(UsageError, match=r"unknown model type '\.h5'; expected \.onnx, \.pt2, \.safetensors"):
        load_predictor(tmp_path / "m.h5", device="cpu")
    (tmp_path / "folder.onnx").mkdir()
    with pytest.raises(InputError, match="is a folder without config.json"):  # a directory is no model file
        load_predictor(tmp_path / "folder.onnx", device="cpu")
    with pytest.raises(UsageError, match="unknown device"):
        load_predictor(linear_onnx(tmp_path / "m.onnx", size=8), device="gpu")


def test_only_a_torch_model_is_loaded_for_training(tmp_path):
    onnx_path = linear_onnx(tmp_path / "m.onnx", size=8)
    with pytest.raises(UsageError, match="ONNX model, which cannot be fine-tuned.*macs-audit calibrate"):
        load_torch_predictor(onnx_path, {}, "cpu", trust_pickled=False)
    predictor = load_torch_predictor(scripted(tmp_path, TinyNet()), {}, "cpu", trust_pickled=False)
    assert predictor.backend == "torch" and predictor.info["format"] == "torchscript"
    assert isinstance(predictor.model, torch.nn.Module)  # what fine-tuning and export work on
