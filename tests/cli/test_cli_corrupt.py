"""`macs-audit corrupt` writes the released layout; evaluate reads it back with --cifar-c."""

import json

import numpy as np
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
GRID = ["--corruptions", "gaussian_noise,contrast", "--batch-size", "20"]


def test_corrupt_then_evaluate_matches_generated_views(tmp_path):
    x, y = tiny_images(40)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    out = tmp_path / "cifar-c"
    result = runner.invoke(app, ["corrupt", "--data", str(tmp_path / "d.npz"), "--out", str(out), *GRID])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["contrast.npy", "gaussian_noise.npy", "labels.npy"]
    noise = np.load(out / "gaussian_noise.npy")
    assert noise.shape == (200, 32, 32, 3) and noise.dtype == np.uint8
    assert (np.load(out / "labels.npy") == np.tile(y, 5)).all()

    model = linear_onnx(tmp_path / "m.onnx")
    reports = []
    for extra in (["--cifar-c", str(out)], []):
        path = tmp_path / f"r{len(reports)}.json"
        result = runner.invoke(
            app,
            [
                "evaluate",
                str(model),
                "--data",
                str(tmp_path / "d.npz"),
                "-o",
                str(path),
                "--perturbations",
                "none",
                "--sensitivity-samples",
                "0",
                "--bootstrap",
                "0",
                *GRID,
                *extra,
            ],
        )
        assert result.exit_code == 0, result.output
        reports.append(json.loads(path.read_text()))
    read, generated = reports
    assert read["corruption_summary"]["source"].startswith("read from")
    assert [v["metrics"] for v in read["views"]] == [v["metrics"] for v in generated["views"]]


def test_corrupt_rejects_partial_severities_and_mismatched_directory(tmp_path):
    x, y = tiny_images(20)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    result = runner.invoke(
        app, ["corrupt", "--data", str(tmp_path / "d.npz"), "--out", str(tmp_path / "o"), "--severities", "1-3"]
    )
    assert result.exit_code == 2 and not (tmp_path / "o").exists()
    runner.invoke(
        app,
        ["corrupt", "--data", str(tmp_path / "d.npz"), "--out", str(tmp_path / "cc"), "--corruptions", "brightness"],
    )
    y2 = (y + 1) % 10  # other labels: the directory does not belong to this data
    np.savez(tmp_path / "other.npz", x=x, y=y2)
    result = runner.invoke(
        app,
        [
            "evaluate",
            str(linear_onnx(tmp_path / "m.onnx")),
            "--data",
            str(tmp_path / "other.npz"),
            "--cifar-c",
            str(tmp_path / "cc"),
            "--corruptions",
            "brightness",
            "-o",
            str(tmp_path / "r.json"),
        ],
    )
    assert result.exit_code == 3 and "does not match" in result.stderr and not (tmp_path / "r.json").exists()
