"""The parity verdict in the summary and on the last line of `evaluate CANDIDATE --reference REFERENCE`
(issue 41, item 10): a change for the worse whose paired 95% interval excludes 0 is a problem named there;
a copy of the reference says that nothing changed for the worse beyond the noise."""

import shutil

import numpy as np
from conftest import linear_onnx, tiny_images
from fixtures.broken_models import scaled_logits
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()


def last_line(output: str) -> str:
    """The verdict, from `audit: ` to the end, unwrapped."""
    return " ".join(output[output.rindex("audit: ") :].split())


def test_the_parity_verdict_ends_the_output(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    x, y = tiny_images(200, seed=2)
    np.savez(tmp_path / "data.npz", x=x, y=y)
    linear_onnx(tmp_path / "reference.onnx", seed=3)
    shutil.copy(tmp_path / "reference.onnx", tmp_path / "copy.onnx")
    scaled_logits(tmp_path / "reference.onnx", tmp_path / "scaled.onnx")  # logits x 3: overconfident
    common = ["--reference", "reference.onnx", "--data", "data.npz", "--sensitivity-samples", "0", "--bootstrap", "50"]
    common += ["--calibrators", "none", "--perturbations", "none"]

    result = runner.invoke(app, ["evaluate", "copy.onnx", *common])
    assert result.exit_code == 0, result.output
    verdict = last_line(result.stdout)
    assert verdict.endswith(
        "; parity: no change for the worse beyond the noise against reference.onnx, 100.00% agreement on clean"
    ), verdict
    summary = " ".join(result.stdout[: result.stdout.index("Clean calibration")].split())
    assert "parity: no change for the worse beyond the noise against reference.onnx" in summary

    result = runner.invoke(app, ["evaluate", "scaled.onnx", *common])
    assert result.exit_code == 0, result.output  # a problem, not a failed gate
    verdict = last_line(result.stdout)
    assert "parity: worse than reference.onnx beyond the noise (clean ECE +" in verdict, verdict
    assert "NLL +" in verdict and "accuracy" not in verdict.split("parity:")[1]  # x 3 keeps every prediction
    summary = " ".join(result.stdout[: result.stdout.index("Clean calibration")].split())
    assert "parity: worse than reference.onnx beyond the noise (clean ECE +" in summary
