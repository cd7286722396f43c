"""The slice section of a real audit (auditing/slicing.py): the sample CIFAR-10 model on built-in test images, 10%
of them darkened (brightness x 0.4, labels kept) and marked in a metadata file; the same marks on undarkened images;
metadata keyed by path in an image folder; the saved predictions' audit slicing alike; bad inputs."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from conftest import SAMPLE_ONNX, linear_onnx
from typer.testing import CliRunner

import macs_audit
from macs_audit.cli import app
from macs_audit.errors import InputError, UsageError

N = 2000  # images: 200 marked, enough for a 13-point accuracy gap to stand out of 2 x (4 + 1) x 5 + 2 tests
FAST = {"perturbations": "none", "sensitivity_samples": 0, "calibrators": "none", "bootstrap": 100}


@pytest.fixture(scope="module")
def builtin():
    with np.load(SAMPLE_ONNX.parents[1] / "macs_audit" / "assets" / "cifar10_test.npz") as data:
        return data["x"][:: 10_000 // N].copy(), data["y"][:: 10_000 // N].astype(np.int64)  # the set is by class


def _marks(tmp_path, marked: np.ndarray, name: str = "lighting.csv"):
    path = tmp_path / name
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["index", "lighting"])
        writer.writerows([i, "dark" if m else "normal"] for i, m in enumerate(marked))
    return path


def _audit(images, labels, metadata, **options):
    return macs_audit.audit(str(SAMPLE_ONNX), (images, labels), metadata=str(metadata), **{**FAST, **options})


def test_darkened_images_are_the_worst_slice_by_their_marks_and_by_brightness(builtin, tmp_path):
    images, labels = builtin
    dark = np.random.default_rng(0).uniform(size=N) < 0.1
    images = images.copy()
    images[dark] = (images[dark] * 0.4).astype(np.uint8)
    section = _audit(images, labels, _marks(tmp_path, dark)).slices
    worst = section.slices[0]
    assert (worst.column, worst.value, worst.n) == ("lighting", "dark", int(dark.sum()))
    assert worst.significant and worst.gaps["accuracy"]["gap"] < -0.05
    assert worst.gaps["accuracy"]["interval"][1] < 0
    darkest = next(
        s
        for s in section.slices
        if s.column == "brightness"
        and s.bounds[0] == min(t.bounds[0] for t in section.slices if t.column == "brightness")
    )
    assert darkest.significant and darkest.gaps["accuracy"]["gap"] < 0
    assert set(section.columns) == {"lighting", "brightness", "contrast", "sharpness", "colourfulness"}
    assert section.columns["brightness"]["source"] == "image" and section.columns["lighting"]["source"] == "file"
    assert section.metadata["matched"] == N and section.tests == 2 * len(section.slices)
    assert 0 < section.multicalibration["error"] < 1


def test_the_same_marks_on_undarkened_images_flag_nothing(builtin, tmp_path):
    images, labels = builtin
    marked = np.random.default_rng(1).uniform(size=N) < 0.1
    section = _audit(images, labels, _marks(tmp_path, marked), image_slices=False).slices
    assert set(section.columns) == {"lighting"}
    assert not any(s.significant for s in section.slices)


def test_saved_predictions_slice_as_the_model_audit(builtin, tmp_path):
    images, labels = builtin
    marked = np.arange(N) % 7 == 0
    np.savez(tmp_path / "data.npz", x=images, y=labels)
    saved = tmp_path / "predictions.npz"
    args = [
        "evaluate",
        str(SAMPLE_ONNX),
        "--data",
        str(tmp_path / "data.npz"),
        "--metadata",
        str(_marks(tmp_path, marked)),
    ]
    args += ["--perturbations", "none", "--sensitivity-samples", "0", "--calibrators", "none", "--bootstrap", "100"]
    result = CliRunner().invoke(app, [*args, "--save-predictions", str(saved), "-o", str(tmp_path / "r.json")])
    assert result.exit_code in (0, 1), result.output
    report = macs_audit.load_report(tmp_path / "r.json")
    again = macs_audit.audit_predictions(saved, calibrators="none", bootstrap=100)
    assert [s.to_dict() for s in again.slices.slices] == [s.to_dict() for s in report.slices.slices]
    assert again.slices.multicalibration == report.slices.multicalibration
    assert again.slices.columns["brightness"]["source"] == "predictions"
    # And the metadata given beside the logits as arrays, with the same slices of the marks.
    arrays = macs_audit.audit_predictions(
        np.load(saved)["logits"], labels, calibrators="none", bootstrap=100, metadata={"lighting": marked}
    )
    assert [(s.column, s.value, s.n) for s in arrays.slices.slices] == [
        (s.column, {"dark": "true", "normal": "false"}[s.value], s.n)
        for s in report.slices.slices
        if s.column == "lighting"
    ]


def test_an_image_folder_is_keyed_by_path_and_sliced_by_original_size(tmp_path):
    from PIL import Image

    root = tmp_path / "folder"
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        cls = f"class{i % 2}"
        (root / cls).mkdir(parents=True, exist_ok=True)
        width = 32 if i % 3 else 48
        Image.fromarray(rng.integers(0, 255, (32, width, 3), dtype=np.uint8)).save(root / cls / f"{i:03d}.png")
        rows.append({"path": f"{cls}/{i:03d}.png", "site": "north" if i < 30 else "south"})
    metadata = tmp_path / "sites.jsonl"
    metadata.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    model = linear_onnx(tmp_path / "model.onnx", num_classes=2)
    report = macs_audit.audit(str(model), str(root), metadata=str(metadata), min_slice_size=10, **FAST)
    section = report.slices
    assert section.metadata["keyed_by"] == "path" and section.metadata["matched"] == 60
    assert {"site", "aspect_ratio"} <= set(section.columns)
    by_value = {(s.column, s.value): s.n for s in section.slices}
    assert by_value[("site", "north")] == 30 and by_value[("aspect_ratio", "1")] == 40
    assert "original_pixels" in section.columns  # two sizes: sliced by value, as the aspect ratio


def test_bad_metadata_is_one_line_and_exit_3_and_a_bad_correction_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"index,site\n0,caf\xe9\n")
    result = CliRunner().invoke(app, ["evaluate", str(SAMPLE_ONNX), "--metadata", str(bad), "--limit", "20"])
    assert result.exit_code == 3, result.output
    assert "not UTF-8" in result.output and len(result.output.strip().splitlines()) == 1
    result = CliRunner().invoke(app, ["evaluate", str(SAMPLE_ONNX), "--slice-correction", "none"])
    assert result.exit_code == 2 and "--slice-correction" in result.output
    with pytest.raises(InputError, match="none of its"):
        macs_audit.audit_predictions(np.zeros((4, 3)), np.arange(4) % 3, metadata=_unmatched(tmp_path))
    with pytest.raises(UsageError, match="metadata as arrays goes with logits as arrays"):
        macs_audit.audit_predictions(tmp_path / "p.npz", metadata={"a": [1]})


def _unmatched(tmp_path):
    path = tmp_path / "far.csv"
    path.write_text("index,site\n100,a\n101,b\n", encoding="utf-8")
    return str(path)


def test_shards_are_keyed_by_key_with_their_own_json_members(tmp_path):
    import io
    import tarfile

    from PIL import Image

    rng = np.random.default_rng(1)
    path = tmp_path / "shard-000000.tar"
    rows = []
    with tarfile.open(path, "w") as tar:
        for i in range(80):
            buffer = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(buffer, format="PNG")
            members = {
                "png": buffer.getvalue(),
                "cls": str(i % 2).encode(),
                "json": json.dumps({"camera": "a" if i < 40 else "b"}).encode(),
            }
            for field, data in members.items():
                info = tarfile.TarInfo(f"s{i:03d}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            rows.append({"key": f"s{i:03d}", "site": "x" if i % 4 else "y"})
    metadata = tmp_path / "sites.jsonl"
    metadata.write_text("".join(json.dumps(row) + "\n" for row in rows[:60]), encoding="utf-8")
    model = linear_onnx(tmp_path / "model.onnx", num_classes=2)
    section = macs_audit.audit(str(model), str(path), metadata=str(metadata), min_slice_size=10, **FAST).slices
    assert section.metadata["keyed_by"] == "key"
    assert (section.metadata["matched"], section.metadata["images_without_metadata"]) == (60, 20)
    assert section.columns["camera"]["source"] == "shards" and section.columns["site"]["missing"] == 20
    by_value = {(s.column, s.value): s.n for s in section.slices}
    assert by_value[("camera", "a")] == 40 and by_value[("site", "y")] == 15
