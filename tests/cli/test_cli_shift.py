"""`evaluate --shift-data NAME=DIR` end to end: ImageNet-A- and ImageNet-R-style trees of real photographs under
their real WordNet ids, a 1,000-output model; the shift section in the JSON and every format, its gate keys."""

import json

import numpy as np
import pytest
from fixtures.shift_trees import image_tree, imagenet_model, subset_classes, validation_folder
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.formats import render
from macs_audit.report import load_report

runner = CliRunner()
FAST = ["--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--calibrators", "none", "-q"]


@pytest.fixture(scope="module")
def shifted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shift-cli")
    model = imagenet_model(tmp / "m.onnx")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1000, 32, 32, 3), dtype=np.uint8)  # one image of each of the 1,000 classes
    np.savez(tmp / "val.npz", x=x, y=np.arange(1000))
    trees = {
        "imagenet-a": image_tree(tmp / "a", subset_classes("imagenet_a", 3), per_class=2),
        "imagenet-r": image_tree(tmp / "r", subset_classes("imagenet_r", 2), per_class=3, seed=1),
    }
    out = tmp / "report.json"
    args = ["evaluate", str(model), "--data", str(tmp / "val.npz"), "-o", str(out), *FAST]
    for name, tree in trees.items():
        args += ["--shift-data", f"{name}={tree}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return tmp, model, trees, out


def test_the_report_holds_each_set_under_both_conventions(shifted):
    _, _, _, out = shifted
    data = json.loads(out.read_text())
    sets = data["shift"]["sets"]
    assert list(sets) == ["imagenet-a", "imagenet-r"]
    a = sets["imagenet-a"]
    assert (a["n"], a["num_classes"], a["num_outputs"]) == (6, 3, 1000)
    assert sets["imagenet-r"]["restricted"]["kind"] == "shift"
    for convention in ("restricted", "unrestricted"):
        mean = np.mean([sets[name][convention]["metrics"]["accuracy"] for name in sets])
        assert data["shift"]["mean"][convention]["accuracy"] == pytest.approx(mean)
    assert "unrestricted" in data["conventions"]["shift"]
    report = load_report(out)  # reads back through the typed sections
    assert report.shift is not None and report.shift.default_convention == "restricted"


@pytest.mark.parametrize("fmt", ["md", "html", "terminal"])
def test_every_format_shows_the_shift_section(shifted, fmt):
    text = render(fmt, load_report(shifted[3]))
    assert "Natural shift" in text and "imagenet-r" in text and "unrestricted" in text


def _gate(tmp, out, toml: str):
    config = tmp / "macs-audit.toml"
    config.write_text(toml)
    return runner.invoke(app, ["gate", str(out), "--config", str(config)])


def test_the_gate_keys_and_per_set_overrides(shifted):
    tmp, _, _, out = shifted
    assert _gate(tmp, out, "[gate]\nmin_shift_accuracy = 0.0\nmax_shift_ece = 1.0\n").exit_code == 0
    failed = _gate(tmp, out, "[gate.shift.imagenet-a]\nmin_accuracy = 1.0\nmax_ece = 0.0\n")
    assert failed.exit_code == 1 and "shift.imagenet-a.min_accuracy" in failed.output
    unknown = _gate(tmp, out, "[gate.shift.imagenet-v2]\nmin_accuracy = 0.1\n")
    assert unknown.exit_code == 3 and "no such set" in unknown.output


def test_a_tree_of_names_the_model_cannot_map_is_one_line(shifted, tmp_path):
    _, model, _, _ = shifted
    (tmp_path / "odd" / "not-a-wnid").mkdir(parents=True)
    image_tree(tmp_path / "t", ["n01440764"], 1)
    (tmp_path / "t" / "n01440764" / "n01440764_0.JPEG").rename(tmp_path / "odd" / "not-a-wnid" / "0.JPEG")
    result = runner.invoke(app, ["evaluate", str(model), "--shift-data", f"odd={tmp_path / 'odd'}", *FAST])
    assert result.exit_code == 3
    assert "--shift-data odd: cannot map the data's 1 classes (not-a-wnid)" in result.output


def test_real_labels_beside_the_original_ones(shifted, tmp_path):
    _, model, _, _ = shifted
    folder = validation_folder(tmp_path / "val", {1: 65, 2: 970, 3: 230, 5: 2, 9: 65})
    out = tmp_path / "real.json"
    args = ["evaluate", str(model), "--data", str(folder), "--real-labels", "-o", str(out), *FAST]
    result = runner.invoke(app, [*args, "--calibration-split", "0"])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    real = data["real_labels"]
    assert real["n"] + real["n_without_labels"] == 5 and "timm" in real["source"]
    assert real["accuracy_original"] == pytest.approx(data["clean"]["metrics"]["accuracy"]) or real["n"] < 5
    assert "any of the image's ReaL labels" in data["conventions"]["real_labels"]
    assert "ImageNet ReaL labels" in render("md", load_report(out))
