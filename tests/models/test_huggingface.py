"""models/huggingface.py: a transformers image classifier from its save_pretrained folder, as the library runs it."""

import json

import numpy as np
import pytest

transformers = pytest.importorskip("transformers", reason="the hf extra (pip install -e '.[hf]')")
torch = pytest.importorskip("torch")

from source_builders import CLASSES, audit_logits, hf_folder, photo_folder, photographs  # noqa: E402

from macs_audit.models.huggingface import PROCESSOR_FILE as PROCESSOR  # noqa: E402
from macs_audit.models.huggingface import processor_preprocessing  # noqa: E402
from macs_audit.models.predictor import load_predictor  # noqa: E402
from macs_audit.models.preprocessing import fit_image  # noqa: E402


@pytest.mark.parametrize("processor", ["convnext", "vit"])
def test_preprocessing_is_the_image_processors_pixel_for_pixel(tmp_path, processor):
    _, image_processor = hf_folder(tmp_path, processor)
    cfg = load_predictor(tmp_path, device="cpu").config
    assert cfg.sources["mean"] == "preprocessor_config.json" and cfg.class_names == list(CLASSES)
    assert cfg.crop_offset == "floor"  # rocket's 383 px wide resize leaves an odd margin: transformers floors it
    for name, photo in photographs().items():
        ours = fit_image(photo, cfg.input_size, cfg.crop_pct, cfg.interpolation, cfg.crop_offset)
        ours = ours.astype(np.float32) / 255
        ours = (ours.transpose(2, 0, 1) - np.reshape(cfg.mean, (3, 1, 1))) / np.reshape(cfg.std, (3, 1, 1))
        theirs = image_processor(photo, return_tensors="np")["pixel_values"][0]
        levels = np.abs(ours - theirs) * np.reshape(cfg.std, (3, 1, 1)) * 255
        assert levels.max() < 1e-3, (name, levels.max())  # the same pixels, to float rounding


def test_processor_keys_read_from_its_json(tmp_path):
    hf_folder(tmp_path, "convnext")
    assert processor_preprocessing(tmp_path) == {
        "input_size": [224, 224],
        "crop_pct": 0.875,
        "interpolation": "bicubic",
        "mean": [0.5, 0.5, 0.5],
        "std": [0.5, 0.5, 0.5],
    }


def test_audit_logits_are_the_models_own_on_its_own_preprocessing(tmp_path):
    model, image_processor = hf_folder(tmp_path / "hf", "vit")
    data, images = photo_folder(tmp_path / "photos")
    logits, report = audit_logits(tmp_path / "hf", data, tmp_path)
    with torch.no_grad():
        expected = model(**image_processor(images, return_tensors="pt")).logits.numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    assert report["model"]["format"] == "hf-transformers" and report["model"]["interpolation"] == "bilinear"
    assert "from preprocessor_config.json" in report["data"]["pipeline"]
    assert "warnings" not in report["model"]  # its own mean/std: no CIFAR-10 default


def test_remote_code_is_refused(tmp_path):
    from macs_audit.errors import InputError

    hf_folder(tmp_path, "vit")
    config = json.loads((tmp_path / "config.json").read_text())
    config["auto_map"] = {"AutoModelForImageClassification": "modeling_mine.Mine"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="never runs"):
        load_predictor(tmp_path, device="cpu")


def test_finetune_writes_a_save_pretrained_folder_that_reads_back(tmp_path):
    from source_builders import AUDIT_QUICK, run_cli, three_class_npz

    hf_folder(tmp_path / "hf", "vit")
    data = three_class_npz(tmp_path / "d.npz")
    out = tmp_path / "ft"
    run_cli("finetune", tmp_path / "hf", "--data", data, "--eval-data", data, "--out", out, "--epochs", "1",
            "--batch-size", "16", *AUDIT_QUICK)  # fmt: skip
    assert {p.name for p in (out / "model").iterdir()} >= {"config.json", "model.safetensors", PROCESSOR}
    assert (out / "model.onnx").is_file() and (out / "model.json").is_file()
    after = json.loads((out / "audit_after.json").read_text())
    assert after["model"]["format"] == "hf-transformers" and after["model"]["path"] == str(out / "model")
    tuned = load_predictor(out / "model", device="cpu")  # the folder alone (and its sidecar) reads back
    assert tuned.config.class_names == list(CLASSES) and tuned.config.input_size == (224, 224)


def test_calibrate_and_export(tmp_path):
    import onnx
    from source_builders import AUDIT_QUICK, run_cli, three_class_npz

    hf_folder(tmp_path / "hf", "convnext")
    data = three_class_npz(tmp_path / "d.npz")
    run_cli("calibrate", tmp_path / "hf", "--data", data, "--eval-data", data, "--out", tmp_path / "cal", *AUDIT_QUICK)
    (written,) = [p for p in (tmp_path / "cal").iterdir() if p.is_dir()]  # the save_pretrained folder
    assert (written / PROCESSOR).is_file()
    calibrated = load_predictor(written, device="cpu")
    assert calibrated.info["format"] == "hf-transformers"
    x = np.random.default_rng(0).random((4, 3, 224, 224), dtype=np.float32)
    original = load_predictor(tmp_path / "hf", device="cpu").predict(x)
    temperature = json.loads(written.with_suffix(".json").read_text())["calibration"]["temperature"]
    np.testing.assert_allclose(calibrated.predict(x), original / temperature, rtol=1e-4, atol=1e-5)
    run_cli("export", tmp_path / "hf", "--out", tmp_path / "hf.onnx")
    props = {p.key: p.value for p in onnx.load(str(tmp_path / "hf.onnx")).metadata_props}
    assert json.loads(props["macs_audit.crop_pct"]) == 0.875
    assert json.loads(props["macs_audit.interpolation"]) == "bicubic"
    assert json.loads(props["macs_audit.crop_offset"]) == "floor"  # the ONNX model crops as transformers does
    assert json.loads(props["macs_audit.sources"])["mean"] == "preprocessor_config.json"
    exported = load_predictor(tmp_path / "hf.onnx", device="cpu")
    assert exported.config.crop_offset == "floor"
    np.testing.assert_allclose(exported.predict(x), original, rtol=1e-3, atol=1e-4)


def test_folder_shards_and_shift_set_give_the_same_logits(tmp_path):
    """The image processor's floored crop (convnext: rocket's odd margin) reaches a shard set and a --shift-data
    set: the same photographs as a folder, as shards and as a shift set score alike."""

    wds = pytest.importorskip("webdataset")
    from source_builders import QUICK
    from typer.testing import CliRunner

    from macs_audit.cli import app

    hf_folder(tmp_path / "hf", "convnext")
    data, _ = photo_folder(tmp_path / "photos")
    (tmp_path / "shards").mkdir()
    with wds.TarWriter(str(tmp_path / "shards" / "s-000000.tar")) as sink:
        for label, cls in enumerate(CLASSES):  # the folder's order: classes sorted, files sorted
            for f in sorted((data / cls).iterdir()):
                sink.write({"__key__": f"{cls}_{f.stem}", "png": f.read_bytes(), "cls": label})
    (tmp_path / "shards" / "classes.txt").write_text("\n".join(CLASSES))
    spec = tmp_path / "shards" / "s-{000000..000000}.tar"
    from_folder, report = audit_logits(tmp_path / "hf", data, tmp_path)
    (tmp_path / "b").mkdir()
    from_shards, _ = audit_logits(tmp_path / "hf", spec, tmp_path / "b")
    np.testing.assert_allclose(from_shards, from_folder, rtol=1e-5, atol=1e-5)
    out = tmp_path / "shift.json"
    args = ["evaluate", str(tmp_path / "hf"), "--data", str(data), *QUICK, "-o", str(out)]
    for name, path in (("folder", data), ("shards", spec)):
        args += ["--shift-data", f"{name}={path}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    shift = json.loads(out.read_text())["shift"]["sets"]
    for name in ("folder", "shards"):  # the model's own class names map the set: its logits are the clean view's
        assert shift[name]["mapped_by"] == "the model's class names"
        got = shift[name]["unrestricted"]["metrics"]
        for key in ("nll", "mean_max_logit", "mean_margin"):
            assert got[key] == pytest.approx(report["clean"]["metrics"][key], rel=1e-6), (name, key)
