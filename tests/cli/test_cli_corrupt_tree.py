"""`corrupt --layout tree` writes the ImageNet-C layout; `evaluate --corrupted-data` (or --cifar-c) reads it back
and scores what the generated grid scores: the same metrics for PNG, up to JPEG's loss for JPEG."""

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
NAMES = ["zebra", "apple", "mango"]  # label order; the class folders sort otherwise
GRID = ["--corruptions", "gaussian_noise,contrast", "--severities", "1-2", "--batch-size", "4"]
QUICK = ["--perturbations", "none", "--sensitivity-samples", "0", "--bootstrap", "0", "--calibration-split", "0"]


def _data(tmp_path, size):
    x, _ = tiny_images(9, size=size)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(9) % 3, class_names=np.array(NAMES))
    return tmp_path / "d.npz", linear_onnx(tmp_path / "m.onnx", num_classes=3, size=size)


def _evaluate(model, data, report, *extra):
    args = ["evaluate", str(model), "--data", str(data), "-o", str(report), *QUICK, *GRID, *extra]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(report.read_text())


@pytest.mark.parametrize(
    ("size", "set_flag", "ext", "read_flag"),
    [(64, [], "jpg", "--corrupted-data"), (224, [], "jpg", "--corrupted-data"), (64, ["cifar"], "png", "--cifar-c")],
)
def test_tree_written_then_read_scores_like_the_generated_grid(tmp_path, size, set_flag, ext, read_flag):
    data, model = _data(tmp_path, size)
    sets = ["--corruption-set", *set_flag] if set_flag else []
    out = tmp_path / "tree"
    result = runner.invoke(app, ["corrupt", "--data", str(data), "--out", str(out), "--layout", "tree", *GRID, *sets])
    assert result.exit_code == 0, result.output
    assert "wrote 36 image files" in result.output
    assert sorted(p.name for p in (out / "contrast" / "2" / "zebra").iterdir()) == [f"{i}.{ext}" for i in (0, 3, 6)]

    generated = _evaluate(model, data, tmp_path / "g.json", *sets)
    read = _evaluate(model, data, tmp_path / "r.json", *sets, read_flag, str(out))
    assert read["corruption_summary"]["source"] == f"read from {out}"
    pairs = [(r, g) for r, g in zip(read["views"], generated["views"], strict=True) if g["kind"] == "corruption"]
    assert len(pairs) == 4
    for r, g in pairs:
        assert r["name"] == g["name"]
        if ext == "png":
            assert r["metrics"] == g["metrics"]
        else:  # JPEG at quality 85 moves pixels, barely the pooled colour the model sees
            assert r["metrics"]["accuracy"] == g["metrics"]["accuracy"]
            assert r["metrics"]["nll"] == pytest.approx(g["metrics"]["nll"], rel=0.05)

    rerun = runner.invoke(app, ["corrupt", "--data", str(data), "--out", str(out), "--layout", "tree", *GRID, *sets])
    assert rerun.exit_code == 0 and "wrote 0 image files (kept 36 finished ones)" in rerun.output


def test_mismatched_class_folders_fail_before_the_audit(tmp_path):
    data, model = _data(tmp_path, 64)
    out = tmp_path / "tree"
    args = ["corrupt", "--data", str(data), "--out", str(out), "--layout", "tree", *GRID]
    assert runner.invoke(app, args).exit_code == 0
    (out / "gaussian_noise" / "1" / "mango").rename(out / "gaussian_noise" / "1" / "n01440764")
    result = runner.invoke(
        app, ["evaluate", str(model), "--data", str(data), *QUICK, *GRID, "--corrupted-data", str(out)]
    )
    assert result.exit_code == 3
    assert "n01440764 names no class of the data (3 classes: zebra, apple, mango)" in result.output


def test_layout_and_severity_options(tmp_path):
    data, _ = _data(tmp_path, 64)
    base = ["corrupt", "--data", str(data), "--out", str(tmp_path / "o"), "--corruptions", "contrast"]
    result = runner.invoke(app, [*base, "--layout", "zip"])
    assert result.exit_code == 2 and "--layout must be auto, npy or tree" in result.output
    result = runner.invoke(app, [*base, "--layout", "npy", "--severities", "1-2"])
    assert result.exit_code == 2 and "--layout tree" in result.output
    result = runner.invoke(app, [*base, "--severities", "1-2", "--limit", "6"])  # 64 px: tiny-imagenet, a tree
    assert result.exit_code == 0, result.output
    assert "frost" not in result.output  # only contrast was asked for
    assert "(6 images x 2 severities per corruption" in result.output
    assert "contrast severity 2: done, 6 images in " in result.output  # its own 6, not the grid's 12
    assert sorted(p.name for p in (tmp_path / "o" / "contrast").iterdir()) == ["1", "2"]
    folder = tmp_path / "imgs"
    (folder / "a").mkdir(parents=True)
    result = runner.invoke(
        app, ["corrupt", "--data", str(folder), "--out", str(folder / "c"), "--layout", "tree", "--corruptions", "fog"]
    )
    assert result.exit_code == 2 and "inside the data folder" in result.output


def test_an_image_folder_cut_like_imagenet_c_and_read_back_with_a_limit(tmp_path):
    """The ImageNet-C situation at 64 px: photographs of other sizes, resized and centre-cropped as the model's
    pipeline does (--input-size, --crop-pct), written as a tree of the whole folder, read back for a --limit
    subset of the same folder (contrast: no randomness, so the subset's generated views are the same bytes)."""
    from PIL import Image

    x, _ = tiny_images(6, size=100)
    folder = tmp_path / "val"
    for i in range(6):
        (folder / NAMES[i % 3]).mkdir(parents=True, exist_ok=True)
        Image.fromarray(x[i, :80]).save(folder / NAMES[i % 3] / f"photo{i}.png")
    model = linear_onnx(tmp_path / "m.onnx", num_classes=3, size=64)
    out = tmp_path / "tree"
    pipeline = ["--input-size", "64", "--crop-pct", "0.875"]
    grid = ["--corruptions", "contrast", "--severities", "1-2", "--corruption-set", "cifar"]
    args = ["corrupt", "--data", str(folder), "--out", str(out), "--layout", "tree", *pipeline, *grid]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    apples = sorted(p.name for p in (out / "contrast" / "1" / "apple").iterdir())
    assert apples == ["photo1.png", "photo4.png"]  # each image keeps its class folder and file name
    with Image.open(out / "contrast" / "1" / "apple" / "photo4.png") as im:
        assert im.size == (64, 64)
    for limit in ([], ["--limit", "3"]):
        common = [str(model), "--data", str(folder), "--crop-pct", "0.875", *QUICK, *grid, *limit]
        reports = []
        for extra in ([], ["--corrupted-data", str(out)]):
            report = tmp_path / f"r{len(reports)}.json"
            result = runner.invoke(app, ["evaluate", *common, "-o", str(report), *extra])
            assert result.exit_code == 0, result.output
            reports.append(json.loads(report.read_text()))
        generated, read = reports
        assert [v["metrics"] for v in read["views"]] == [v["metrics"] for v in generated["views"]]
        assert read["views"][-1]["name"] == "contrast@2" and read["data"]["n"] == (3 if limit else 6)


def test_a_tree_keeps_the_sources_names_with_its_formats_suffix_and_arrays_get_index_names(tmp_path):
    """ImageNet-style names (ILSVRC2012_val_*.JPEG, in a sub-folder too) written as the imagenet set's JPEGs
    keep their stems; an npz's images, which have no names, are numbered by position."""
    from PIL import Image

    x, _ = tiny_images(4, size=224)
    folder = tmp_path / "val"
    names = ["n01440764/ILSVRC2012_val_00000293.JPEG", "n01440764/extra/ILSVRC2012_val_00002138.JPEG"]
    names += ["n01443537/ILSVRC2012_val_00000236.JPEG", "n01443537/ILSVRC2012_val_00000262.png"]
    for image, name in zip(x, names, strict=True):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / name)
    out = tmp_path / "tree"
    grid = ["--corruptions", "contrast", "--severities", "1", "--corruption-set", "imagenet"]
    result = runner.invoke(app, ["corrupt", "--data", str(folder), "--out", str(out), "--layout", "tree", *grid])
    assert result.exit_code == 0, result.output
    cell = out / "contrast" / "1"
    written = sorted(p.relative_to(cell).as_posix() for p in cell.rglob("*") if p.is_file())
    assert written == sorted(str(Path(n).with_suffix(".jpg")) for n in names)
    npz = tmp_path / "d.npz"
    np.savez(npz, x=x[:, :32, :32], y=np.array([0, 1, 0, 1]))
    grid[-1] = "cifar"
    result = runner.invoke(
        app, ["corrupt", "--data", str(npz), "--out", str(tmp_path / "t2"), "--layout", "tree", *grid]
    )
    assert result.exit_code == 0, result.output
    cell = tmp_path / "t2" / "contrast" / "1"
    assert sorted(p.relative_to(cell).as_posix() for p in cell.rglob("*.png")) == [
        "airplane/0.png",
        "airplane/2.png",
        "automobile/1.png",
        "automobile/3.png",
    ]
