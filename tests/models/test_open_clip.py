"""models/open_clip.py: an OpenCLIP model as a zero-shot classifier of the --class-prompts classes."""

import json

import numpy as np
import pytest

open_clip = pytest.importorskip("open_clip", reason="the clip extra (pip install -e '.[clip]')")
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from source_builders import CLASSES, TINY_CLIP, audit_logits, photo_folder, tiny_clip  # noqa: E402

from macs_audit.errors import UsageError  # noqa: E402
from macs_audit.models.predictor import load_predictor  # noqa: E402

ARCH = {"arch": f"open_clip:{TINY_CLIP}"}


def test_audit_logits_are_open_clips_zero_shot_on_its_own_preprocessing(tmp_path):
    weights, prompts = tmp_path / "clip.pt", tmp_path / "prompts.json"
    model, tokenizer = tiny_clip(weights, prompts)
    data, images = photo_folder(tmp_path / "photos")
    logits, report = audit_logits(weights, data, tmp_path, "--arch", ARCH["arch"], "--class-prompts", str(prompts))
    # open_clip's own zero-shot head: each class's templates' normalised text embeddings, averaged, normalised
    templates = json.loads(prompts.read_text())["templates"]
    preprocess = open_clip.image_transform(model.visual.image_size, is_train=False)
    with torch.no_grad():
        heads = []
        for name in CLASSES:
            text = model.encode_text(tokenizer([t.format(name) for t in templates]))
            heads.append(torch.nn.functional.normalize(torch.nn.functional.normalize(text, dim=-1).mean(0), dim=0))
        image = model.encode_image(torch.stack([preprocess(Image.fromarray(i)) for i in images]))
        image = torch.nn.functional.normalize(image, dim=-1)
        expected = (model.logit_scale.exp() * image @ torch.stack(heads).T).numpy()
    # Pillow's and torch's bicubic differ by a grey level on under 1% of the pixels
    np.testing.assert_allclose(logits, expected, rtol=0.02, atol=0.02 * np.abs(expected).max())
    assert report["model"]["format"] == "open-clip" and report["model"]["class_names"] == list(CLASSES)
    assert report["model"]["config_sources"]["mean"] == "open_clip config"


def test_prompts_file_is_needed_and_must_name_the_classes(tmp_path):
    weights = tmp_path / "clip.pt"
    tiny_clip(weights)
    with pytest.raises(UsageError, match="needs --class-prompts"):
        load_predictor(weights, ARCH, device="cpu")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"templates": ["a {}"]}))
    with pytest.raises(UsageError, match='needs "classes"'):
        load_predictor(weights, ARCH, device="cpu", class_prompts=bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"classes": ["a", "b"]}))
    with pytest.raises(UsageError, match="does not match the 2 classes"):
        load_predictor(weights, {**ARCH, "num_classes": 3}, device="cpu", class_prompts=good)


def test_preprocessing_is_open_clips_within_a_grey_level(tmp_path):
    """OpenCLIP's eval transform (Resize of the shorter side, bicubic, CenterCrop) on Pillow against ours: torch's
    antialiased bicubic differs from Pillow's by a grey level on under 1% of the pixels."""
    from conftest import assert_within_grey_levels
    from source_builders import photographs

    from macs_audit.models.preprocessing import fit_image

    weights, prompts = tmp_path / "clip.pt", tmp_path / "prompts.json"
    model, _ = tiny_clip(weights, prompts)
    cfg = load_predictor(weights, ARCH, device="cpu", class_prompts=prompts).config
    assert (cfg.input_size, cfg.crop_pct, cfg.interpolation) == ((64, 64), 1.0, "bicubic")
    preprocess = open_clip.image_transform(model.visual.image_size, is_train=False)
    mean, std = (np.reshape(v, (3, 1, 1)) for v in (cfg.mean, cfg.std))
    for name, photo in photographs().items():
        theirs = preprocess(Image.fromarray(photo)).numpy() * std + mean
        theirs = np.rint(theirs * 255).astype(np.uint8).transpose(1, 2, 0)
        ours = fit_image(photo, cfg.input_size, cfg.crop_pct, cfg.interpolation)
        assert_within_grey_levels(ours, theirs, 1, name)
        assert (ours != theirs).mean() < 0.01, name


def test_exported_with_its_classifier_and_calibrated_as_onnx(tmp_path):
    """The zero-shot head is not rewritten as torch weights; its ONNX export holds the class embeddings and the
    model's preprocessing, and calibrate fits a temperature to it as to any ONNX model."""
    from source_builders import AUDIT_QUICK, run_cli, three_class_npz

    weights, prompts = tmp_path / "clip.pt", tmp_path / "prompts.json"
    tiny_clip(weights, prompts)
    run_cli("export", weights, "--arch", ARCH["arch"], "--class-prompts", prompts, "--out", tmp_path / "clip.onnx")
    exported = load_predictor(tmp_path / "clip.onnx", device="cpu")
    original = load_predictor(weights, ARCH, device="cpu", class_prompts=prompts)
    assert exported.config.class_names == list(CLASSES) and exported.config.interpolation == "bicubic"
    assert "warnings" not in exported.info  # its own mean/std travelled in the metadata
    x = np.random.default_rng(0).random((4, 3, 64, 64), dtype=np.float32)
    np.testing.assert_allclose(exported.predict(x), original.predict(x), rtol=1e-4, atol=1e-4)
    data = three_class_npz(tmp_path / "d.npz", size=64)
    run_cli("calibrate", tmp_path / "clip.onnx", "--data", data, "--eval-data", data, "--out", tmp_path / "cal",
            *AUDIT_QUICK)  # fmt: skip
    assert list((tmp_path / "cal").glob("*.onnx"))
