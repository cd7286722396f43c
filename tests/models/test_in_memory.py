"""predictor_of: a torch.nn.Module or an onnxruntime.InferenceSession in memory as the Predictor the file loaders
give, with the in-memory rule for preprocessing (input_size, mean, std given unless the model carries them)."""

import numpy as np
import pytest
from conftest import linear_onnx

from macs_audit.errors import UsageError
from macs_audit.models.in_memory import ONNX_SESSION, TORCH_MODULE, predictor_of
from macs_audit.models.predictor import load_predictor

MEAN, STD = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
PREPROCESSING = {"input_size": [8, 8], "mean": MEAN, "std": STD}


def _images(n: int = 6, size: int = 8, seed: int = 0) -> np.ndarray:
    """Float images in [0, 1], (N, 3, size, size): what a Predictor takes."""
    return np.random.default_rng(seed).random((n, 3, size, size), dtype=np.float32)


def _normalised(images: np.ndarray) -> np.ndarray:
    mean, std = np.reshape(MEAN, (1, 3, 1, 1)), np.reshape(STD, (1, 3, 1, 1))
    return ((images - mean) / std).astype(np.float32)


def _tiny_module(pretrained_cfg=None):
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.head = torch.nn.Linear(4, 5)

        def forward(self, x):
            return self.head(self.conv(x).mean(dim=(2, 3)))

    module = Tiny()
    if pretrained_cfg is not None:
        module.pretrained_cfg = pretrained_cfg  # as timm's models carry their preprocessing
    return module


def test_torch_module_logits_equal_the_modules_own_and_the_report_names_no_file(one_torch_thread):
    import torch

    module = _tiny_module().train()
    predictor = predictor_of(module, PREPROCESSING, device="cpu")
    images = _images()
    with torch.no_grad():
        expected = module(torch.from_numpy(_normalised(images))).numpy()
    np.testing.assert_allclose(predictor.predict(images), expected, rtol=1e-5, atol=1e-6)
    assert not module.training  # put in eval mode, as documented
    assert predictor.backend == "torch" and predictor.num_classes == 5
    assert predictor.info["format"] == TORCH_MODULE
    assert predictor.info["path"] is None and predictor.info["sha256"] is None
    assert predictor.config.sources["mean"] == "flag" and "warnings" not in predictor.info


def test_torch_module_images_of_another_size_are_resized_as_for_a_file_model(one_torch_thread):
    predictor = predictor_of(_tiny_module(), {**PREPROCESSING, "input_size": 6}, device="cpu")
    assert predictor.config.input_size == (6, 6)
    assert predictor.predict(_images(size=8)).shape == (6, 5)


def test_torch_module_without_its_preprocessing_names_the_missing_keywords():
    with pytest.raises(UsageError) as info:
        predictor_of(_tiny_module(), {"input_size": 8}, device="cpu")
    message = str(info.value)
    assert "mean=..." in message and "std=..." in message and "input_size" not in message
    assert "\n" not in message
    with pytest.raises(UsageError, match=r"input_size=\.\.\., mean=\.\.\., std=\.\.\."):
        predictor_of(_tiny_module(), None, device="cpu")


def test_torch_module_carrying_a_pretrained_cfg_needs_no_keywords_and_keywords_win(one_torch_thread):
    carried = {"input_size": (3, 8, 8), "mean": MEAN, "std": STD, "interpolation": "bicubic"}
    predictor = predictor_of(_tiny_module(carried), {}, device="cpu")
    assert predictor.config.input_size == (8, 8) and predictor.config.mean == tuple(MEAN)
    assert predictor.config.sources["mean"] == "pretrained_cfg"
    assert predictor.config.interpolation == "bicubic"
    given = predictor_of(_tiny_module(carried), {"mean": [0.0, 0.0, 0.0]}, device="cpu")
    assert given.config.mean == (0.0, 0.0, 0.0) and given.config.sources["mean"] == "flag"
    with pytest.raises(UsageError, match="pretrained_cfg.mean"):
        predictor_of(_tiny_module({**carried, "mean": "imagenet"}), {}, device="cpu")


def test_onnx_session_logits_equal_the_sessions_own_and_the_file_loaders(tmp_path):
    import onnxruntime as ort

    path = linear_onnx(tmp_path / "model.onnx", num_classes=7, size=8)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    predictor = predictor_of(session, {"mean": MEAN, "std": STD}, device="auto")
    images = _images()
    expected = session.run(None, {"images": _normalised(images)})[0]
    np.testing.assert_allclose(predictor.predict(images), expected, rtol=1e-6, atol=1e-6)
    from_file = load_predictor(path, {"mean": MEAN, "std": STD}, device="cpu")
    np.testing.assert_allclose(predictor.predict(images), from_file.predict(images), rtol=1e-6, atol=1e-6)
    assert predictor.config.input_size == (8, 8)  # the graph's static size: carried
    assert predictor.num_classes == 7 and predictor.device == "cpu"
    assert predictor.info["format"] == ONNX_SESSION
    assert predictor.info["path"] is None and predictor.info["sha256"] is None


def test_onnx_session_carries_what_its_metadata_and_shape_say(tmp_path):
    import json

    import onnxruntime as ort

    metadata = {"macs_audit.mean": json.dumps(MEAN), "macs_audit.std": json.dumps(STD)}
    carried = ort.InferenceSession(str(linear_onnx(tmp_path / "m.onnx", size=8, metadata=metadata)))
    assert predictor_of(carried, {}).config.sources["mean"] == "metadata"
    bare = ort.InferenceSession(str(linear_onnx(tmp_path / "bare.onnx", size=8)))
    with pytest.raises(UsageError, match=r"does not carry its mean and std: pass mean=\.\.\., std=\.\.\."):
        predictor_of(bare, {})
    dynamic = ort.InferenceSession(str(linear_onnx(tmp_path / "dynamic.onnx", size="side")))
    with pytest.raises(UsageError, match=r"ONNX session does not carry its input_size, mean and std"):
        predictor_of(dynamic, {})


def test_onnx_session_refuses_another_device_or_precision(tmp_path):
    import onnxruntime as ort

    session = ort.InferenceSession(str(linear_onnx(tmp_path / "m.onnx", size=8)), providers=["CPUExecutionProvider"])
    with pytest.raises(UsageError, match=r"device='cuda:0', but the ONNX session runs on cpu"):
        predictor_of(session, {"mean": MEAN, "std": STD}, device="cuda:0")
    with pytest.raises(UsageError, match="precision='bf16' is for torch models"):
        predictor_of(session, {"mean": MEAN, "std": STD}, precision="bf16")
    assert predictor_of(session, {"mean": MEAN, "std": STD}, device="cpu").device == "cpu"


def test_other_objects_and_unknown_settings_are_usage_errors():
    with pytest.raises(UsageError, match=r"must be a torch.nn.Module or an onnxruntime.InferenceSession, got "):
        predictor_of(object(), PREPROCESSING)
    with pytest.raises(UsageError, match=r"unknown model setting 'men'; did you mean 'mean'\?"):
        predictor_of(_tiny_module(), {**PREPROCESSING, "men": MEAN})
