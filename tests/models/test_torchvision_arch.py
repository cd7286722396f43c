"""models/torchvision_arch.py: --arch torchvision:NAME, the builder with weights=None and the state dict loaded."""

import numpy as np
import pytest
import torch
from source_builders import audit_logits, photo_folder, torchvision_weights

from macs_audit.errors import InputError, UsageError
from macs_audit.models.predictor import load_predictor


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_class_count_read_off_the_classifier_and_logits_are_torchvisions(tmp_path, name):
    model = torchvision_weights(tmp_path / "net.pt", name)
    predictor = load_predictor(tmp_path / "net.pt", {"arch": f"torchvision:{name}", "input_size": [64, 64]}, "cpu")
    assert predictor.num_classes == 3 and predictor.info["format"] == "torchvision"
    x = np.random.default_rng(0).random((4, 3, 64, 64), dtype=np.float32)
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (predictor.config.mean, predictor.config.std))
    with torch.no_grad():
        expected = model((torch.from_numpy(x) - mean) / std).numpy()
    np.testing.assert_allclose(predictor.predict(x), expected, rtol=1e-4, atol=1e-5)


def test_cifar_default_warns_for_a_ten_class_model_not_known_to_fit_it(tmp_path):
    """The issue's case: resnet18(num_classes=10) as a state dict was audited silently at CIFAR-10's settings."""
    import torchvision

    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), tmp_path / "r18.pt")
    predictor = load_predictor(tmp_path / "r18.pt", {"arch": "torchvision:resnet18"}, "cpu")
    assert "not known to be a CIFAR-10 classifier" in predictor.info["warnings"][0]


def test_end_to_end_through_the_cli(tmp_path):
    torchvision_weights(tmp_path / "net.pt")
    data, _ = photo_folder(tmp_path / "photos")
    extra = ("--arch", "torchvision:resnet18", "--input-size", "96", "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25")
    logits, report = audit_logits(tmp_path / "net.pt", data, tmp_path, *extra)
    assert logits.shape == (6, 3) and report["model"]["precision"] == "fp32"


def test_unknown_builder_and_a_checkpoint_of_another_shape(tmp_path):
    torchvision_weights(tmp_path / "net.pt")
    with pytest.raises(UsageError, match="not a torchvision classification model"):
        load_predictor(tmp_path / "net.pt", {"arch": "torchvision:fasterrcnn_resnet50_fpn"}, "cpu")
    with pytest.raises(InputError, match="does not fit torchvision:resnet18 with 5 classes"):
        load_predictor(tmp_path / "net.pt", {"arch": "torchvision:resnet18", "num_classes": 5}, "cpu")


def test_finetune_and_calibrate_write_weights_that_read_back_as_torchvision(tmp_path):
    import json

    from source_builders import AUDIT_QUICK, run_cli, three_class_npz

    torchvision_weights(tmp_path / "net.pt")
    data = three_class_npz(tmp_path / "d.npz", size=32)
    model = ("--arch", "torchvision:resnet18", "--input-size", "32")
    out = tmp_path / "ft"
    run_cli("finetune", tmp_path / "net.pt", *model, "--data", data, "--eval-data", data, "--out", out, "--epochs",
            "1", "--batch-size", "16", *AUDIT_QUICK)  # fmt: skip
    assert json.loads((out / "model.json").read_text())["arch"] == "torchvision:resnet18"
    after = json.loads((out / "audit_after.json").read_text())
    assert after["model"]["format"] == "torchvision" and after["model"]["path"] == str(out / "model.safetensors")
    run_cli("calibrate", tmp_path / "net.pt", *model, "--data", data, "--eval-data", data, "--out", tmp_path / "cal",
            *AUDIT_QUICK)  # fmt: skip
    (written,) = (tmp_path / "cal").glob("*.safetensors")
    calibrated = load_predictor(written, device="cpu")  # its sidecar names the arch
    assert calibrated.info["format"] == "torchvision" and calibrated.num_classes == 3
