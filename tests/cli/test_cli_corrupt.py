"""`macs-audit corrupt` writes the released layout; evaluate reads it back with --cifar-c."""

import json
import os
import stat
import time

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


def test_corrupt_removes_its_own_stale_temporaries_and_writes_ordinary_modes(tmp_path):
    """A killed run leaves `.NAME.XXXXXXXX.tmp` files; the next run into the folder removes those (and
    nothing else), and its outputs get the umask's mode like every other output (not mkstemp's 0600)."""
    x, y = tiny_images(20)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    out = tmp_path / "cc"
    out.mkdir()
    old = time.time() - 3600
    stale = [out / ".gaussian_noise.npy.k3j_x9a2.tmp", out / ".labels.npy.0a1b2c3d.tmp"]
    kept = [out / ".notes.txt.k3j_x9a2.tmp", out / "mine.tmp", out / ".fog.npy.k3j_x9a2.tmp.bak"]
    for path in stale + kept:
        np.save(path.open("wb"), np.zeros(3, np.uint8))
        os.utime(path, (old, old))
    mask = os.umask(0o022)
    try:
        result = runner.invoke(
            app, ["corrupt", "--data", str(tmp_path / "d.npz"), "--out", str(out), "--corruptions", "gaussian_noise"]
        )
    finally:
        os.umask(mask)
    assert result.exit_code == 0, result.output
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in kept)
    for name in ("labels.npy", "gaussian_noise.npy"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o644
