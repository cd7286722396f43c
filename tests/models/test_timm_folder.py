"""models/timm_folder.py: a folder timm's save_for_hf wrote, read with its pretrained_cfg as timm evaluates it."""

import numpy as np
import pytest
import timm
import torch
from conftest import assert_within_grey_levels
from PIL import Image
from source_builders import CLASSES, audit_logits, photo_folder, photographs, timm_folder
from timm.data import create_transform, resolve_data_config

from macs_audit.models.predictor import load_predictor
from macs_audit.models.preprocessing import fit_image


def _timm_pixels(model, photo):
    """timm's own eval transform up to the normalisation, as uint8: Resize(bicubic) + CenterCrop on a PIL image."""
    config = resolve_data_config({}, model=model)
    transform = create_transform(**config)
    normalised = transform(Image.fromarray(photo)).numpy()
    mean, std = (np.reshape(config[k], (3, 1, 1)) for k in ("mean", "std"))
    return np.rint((normalised * std + mean) * 255).astype(np.uint8).transpose(1, 2, 0)


def test_config_is_the_models_own_and_pixels_are_timms(tmp_path):
    model = timm_folder(tmp_path)
    predictor = load_predictor(tmp_path, device="cpu")
    cfg = predictor.config
    assert (cfg.arch, cfg.num_classes, cfg.class_names) == ("resnet18", 3, list(CLASSES))
    assert (cfg.input_size, cfg.crop_pct, cfg.interpolation) == ((224, 224), 0.95, "bicubic")
    assert cfg.mean == model.pretrained_cfg["mean"] and cfg.sources["crop_pct"] == "config.json"
    for name, photo in photographs().items():
        ours = fit_image(photo, cfg.input_size, cfg.crop_pct, cfg.interpolation)
        theirs = _timm_pixels(model, photo)
        # torch's antialiased bicubic against Pillow's: within one grey level, and equal almost everywhere
        assert_within_grey_levels(ours, theirs, 1, name)
        assert (ours != theirs).mean() < 0.01, name


def test_audit_logits_are_timms_on_timms_preprocessing(tmp_path):
    model = timm_folder(tmp_path / "timm")
    data, images = photo_folder(tmp_path / "photos")
    logits, report = audit_logits(tmp_path / "timm", data, tmp_path)
    transform = create_transform(**resolve_data_config({}, model=model))
    with torch.no_grad():
        expected = model(torch.stack([transform(Image.fromarray(i)) for i in images])).numpy()
    # Pillow's and torch's bicubic differ by a grey level on under 1% of the pixels
    np.testing.assert_allclose(logits, expected, rtol=0.02, atol=0.02 * np.abs(expected).max())
    assert report["model"]["format"] == "timm-folder" and report["model"]["config_sources"]["mean"] == "config.json"


def test_arch_hf_hub_reads_the_cached_config_with_a_weights_file(tmp_path, monkeypatch):
    """--arch hf-hub:ORG/NAME: the architecture and preprocessing of a repository in the local cache, the weights
    of the file given; a repository not cached is an error, not a download."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    from macs_audit.errors import InputError
    from macs_audit.models import sources

    timm_folder(tmp_path / "snapshot")
    weights = tmp_path / "tuned.pt"
    torch.save(timm.create_model("resnet18", num_classes=3).state_dict(), weights)

    def snapshot(repo, local_files_only):
        assert local_files_only
        if repo != "timm/resnet18.a1_in1k":
            raise LocalEntryNotFoundError("not cached")
        return str(tmp_path / "snapshot")

    monkeypatch.setattr("huggingface_hub.snapshot_download", snapshot)
    predictor = load_predictor(weights, {"arch": "hf-hub:timm/resnet18.a1_in1k"}, device="cpu")
    assert predictor.config.crop_pct == 0.95 and predictor.info["path"] == str(weights)
    assert load_predictor("hf-hub:timm/resnet18.a1_in1k", device="cpu").config.class_names == list(CLASSES)
    with pytest.raises(InputError, match="not in the local Hugging Face cache"):
        sources.cached_hub_folder("hf-hub:timm/not-cached")


def test_a_finetuned_timm_folder_reloads_with_its_model_args(tmp_path):
    """A folder whose config.json holds model_args (global_pool "max": the same keys as the default "avg", other
    logits): the fine-tuned model's sidecar carries them on, so the written weights reload as that architecture."""
    import json

    from source_builders import AUDIT_QUICK, run_cli, three_class_npz
    from timm.models import save_for_hf

    from macs_audit.models.torch import read_state_dict

    model = timm.create_model("test_resnet", num_classes=len(CLASSES), global_pool="max").eval()
    labels = {"label_names": list(CLASSES)}
    save_for_hf(model, str(tmp_path / "timm"), model_config=labels, model_args={"global_pool": "max"})
    x = torch.rand(4, 3, 160, 160)  # in [0, 1]: the predictor normalises, the module takes it normalised
    mean, std = (torch.tensor(model.pretrained_cfg[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
    with torch.no_grad():
        own = model((x - mean) / std).numpy()
    start = load_predictor(tmp_path / "timm", device="cpu")
    assert start.config.model_args["global_pool"] == "max"  # with save_for_hf's in_chans
    np.testing.assert_allclose(start.predict(x.numpy()), own, rtol=1e-4, atol=1e-5)
    data = three_class_npz(tmp_path / "d.npz")
    out = tmp_path / "ft"
    run_cli("finetune", tmp_path / "timm", "--data", data, "--eval-data", data, "--out", out, "--epochs", "0.25",
            "--batch-size", "16", *AUDIT_QUICK)  # fmt: skip
    sidecar = json.loads((out / "model.json").read_text())
    assert sidecar["arch"] == "test_resnet" and sidecar["model_args"] == start.config.model_args
    state = read_state_dict(out / "model.safetensors")
    tuned = timm.create_model("test_resnet", num_classes=len(CLASSES), global_pool="max").eval()
    tuned.load_state_dict(state)
    with torch.no_grad():
        expected = tuned((x - mean) / std).numpy()
    reloaded = load_predictor(out / "model.safetensors", device="cpu")
    np.testing.assert_allclose(reloaded.predict(x.numpy()), expected, rtol=1e-4, atol=1e-5)
    default = timm.create_model("test_resnet", num_classes=len(CLASSES)).eval()
    default.load_state_dict(state)  # the same keys: without model_args the weights load into another model
    with torch.no_grad():
        assert not np.allclose(default((x - mean) / std).numpy(), expected, rtol=1e-3, atol=1e-4)
