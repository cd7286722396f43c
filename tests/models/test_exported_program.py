"""models/exported_program.py: torch.export programs (.pt2), their input size and class count their own."""

import numpy as np
import pytest
import torch
from source_builders import audit_logits, exported_program, photo_folder

from macs_audit.errors import InputError
from macs_audit.models.predictor import load_predictor


@pytest.mark.parametrize("batch", [None, 3])  # a dynamic batch, and a program exported for 3 images
def test_logits_are_the_programs_on_any_batch(tmp_path, batch):
    model = exported_program(tmp_path / "net.pt2", batch)
    predictor = load_predictor(tmp_path / "net.pt2", {"mean": [0.5] * 3, "std": [0.25] * 3}, device="cpu")
    assert predictor.config.input_size == (32, 32) and predictor.config.sources["input_size"] == "exported program"
    assert predictor.num_classes == 3 and predictor.info["format"] == "torch-export"
    x = np.random.default_rng(0).random((7, 3, 32, 32), dtype=np.float32)
    with torch.no_grad():
        expected = model((torch.from_numpy(x) - 0.5) / 0.25).numpy()
    np.testing.assert_allclose(predictor.predict(x), expected, rtol=1e-5, atol=1e-5)


def test_end_to_end_through_the_cli_and_a_contradicting_size(tmp_path):
    exported_program(tmp_path / "net.pt2")
    data, _ = photo_folder(tmp_path / "photos")
    logits, report = audit_logits(tmp_path / "net.pt2", data, tmp_path)
    assert logits.shape == (6, 3) and "not known to be a CIFAR-10" not in str(report["model"].get("warnings"))
    assert "3-class model" in report["model"]["warnings"][0]  # CIFAR-10's mean/std on a model they do not fit
    with pytest.raises(InputError, match="the program's input is 32x32"):
        load_predictor(tmp_path / "net.pt2", {"input_size": [64, 64]}, device="cpu")


def test_arrays_at_another_size_say_how_they_were_resized(tmp_path):
    from source_builders import three_class_npz

    exported_program(tmp_path / "net.pt2")
    data = three_class_npz(tmp_path / "d.npz", size=40)
    _, report = audit_logits(tmp_path / "net.pt2", data, tmp_path, "--interpolation", "bicubic")
    expected = "arrays of 40x40 resized to 32x32 from exported program (bicubic from flag, whole)"
    assert report["data"]["pipeline"] == expected
