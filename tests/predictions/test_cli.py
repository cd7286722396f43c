"""`macs-audit evaluate --predictions`: the round trip with --save-predictions (bit for bit), the companion sets as
predictions, parity between two prediction files, the options that need a model refused, bad input (exit 3,
nothing written), and a whole process that never imports torch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
ANALYSIS = ("--bootstrap", "40", "--calibration-split", "0.4", "--calibrators", "temperature,vector,isotonic")
# The sections an audit of predictions gives, which the round trip keeps to the last bit.
KEPT = ("clean", "temperature_scaling", "calibrators", "conformal", "margin_histogram", "ood", "unlabeled")


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny model's audit with OOD and unlabeled data, its report (a.json) and its predictions (p.npz)."""
    tmp = tmp_path_factory.mktemp("round")
    model = linear_onnx(tmp / "m.onnx", seed=2)
    x, y = tiny_images(240, seed=4)
    np.savez(tmp / "data.npz", x=x, y=y)
    np.savez(tmp / "ood.npz", x=tiny_images(50, seed=9)[0] // 3)
    np.savez(tmp / "target.npz", x=tiny_images(60, seed=10)[0])
    result = run(
        "evaluate", model, "--data", tmp / "data.npz", "--ood-data", tmp / "ood.npz", "--unlabeled",
        tmp / "target.npz", "--perturbations", "none", "--sensitivity-samples", "0", "--batch-size", "64",
        *ANALYSIS, "--save-predictions", tmp / "p.npz", "-o", tmp / "a.json", "-q",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return tmp


def test_the_round_trip_gives_the_same_sections_bit_for_bit(saved):
    result = run("evaluate", "--predictions", saved / "p.npz", *ANALYSIS, "-o", saved / "b.json", "-q")
    assert result.exit_code == 0, result.output
    a, b = (json.loads((saved / name).read_text()) for name in ("a.json", "b.json"))
    for section in KEPT:
        assert a[section] is not None, section
        assert json.dumps(b[section]) == json.dumps(a[section]), section
    assert a["clean"]["intervals"] and len(a["calibrators"]["methods"]) == 4  # resampled and fitted
    assert b["model"]["format"] == b["data"]["format"] == "predictions" and b["runtime"]["batch_size"] == 64
    assert b["views"] == [] and set(b["conventions"]["absent_sections"]) == {
        "views", "robustness", "corruption_summary", "shift", "real_labels", "parity"
    }  # fmt: skip
    assert "bootstrap" in b["settings"]["options"] and "perturbations" not in b["settings"]["options"]


def test_a_csv_of_the_same_logits_and_the_companions_as_their_own_files(saved, tmp_path):
    found = np.load(saved / "p.npz")
    names = [str(n) for n in found["class_names"]]
    logits, labels = found["logits"].astype(np.float64), found["labels"]
    with open(tmp_path / "p.csv", "w") as fh:
        fh.write(",".join(["id", "label", *(f"logit_{n}" for n in names)]) + "\n")
        for i in range(len(labels)):
            fh.write(",".join([f"s{i}", names[labels[i]], *(repr(float(v)) for v in logits[i])]) + "\n")
    np.savez(tmp_path / "ood.npz", logits=found["ood_logits"])
    np.savez(tmp_path / "shift.npz", logits=logits[::-1] * 0.5, labels=labels[::-1])
    order = np.random.default_rng(0).permutation(len(labels))  # the reference's rows in another order, by id
    np.savez(tmp_path / "ref.npz", logits=logits[order] * 2, ids=np.array([f"s{i}" for i in order]))
    result = run(
        "evaluate", "--predictions", tmp_path / "p.csv", "--ood-predictions", tmp_path / "ood.npz",
        "--shift-predictions", f"half={tmp_path / 'shift.npz'}", "--reference-predictions", tmp_path / "ref.npz",
        *ANALYSIS, "-o", tmp_path / "c.json", "-q",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    a, c = (json.loads(path.read_text()) for path in (saved / "a.json", tmp_path / "c.json"))
    # The CSV's float64 text of the float32 logits: the same values, so the same numbers to rounding.
    assert c["clean"]["metrics"]["ece"] == pytest.approx(a["clean"]["metrics"]["ece"], abs=1e-12)
    # The logit scores as the model audit's (the CSV holds no features: the feature scores are the model's own).
    logit_scores = ("msp", "max_logit", "energy", "gen")
    assert {k: a["ood"]["scores"][k] for k in logit_scores} == c["ood"]["scores"]
    assert a["ood"].get("features") is not None and c["ood"].get("features") is None
    assert c["ood"]["source"].endswith("ood.npz") and c["ood"]["format"] == "predictions"
    assert c["unlabeled"] is None  # not given
    shift = c["shift"]["sets"]["half"]
    assert shift["n"] == 240 and shift["num_classes"] == shift["num_outputs"] == 10
    assert shift["restricted"]["metrics"]["accuracy"] == shift["unrestricted"]["metrics"]["accuracy"]
    parity = c["parity"]
    assert parity["paired_by"] == "id" and parity["views"][0]["name"] == "clean"
    assert parity["views"][0]["agreement"] == 1.0  # twice the logits: the same top-1 for every sample, paired by id
    assert parity["reference_preprocessing"] is None
    assert set(c["conventions"]["absent_sections"]) == {"views", "robustness", "corruption_summary", "real_labels"}


def test_a_gate_on_predictions(saved, tmp_path):
    (tmp_path / "gate.toml").write_text("[gate]\nmin_accuracy = 0.01\nmax_ece = 0.99\n")
    args = ("evaluate", "--predictions", saved / "p.npz", "--bootstrap", "0", "--config", tmp_path / "gate.toml")
    assert run(*args, "--gate", "-q").exit_code == 0
    (tmp_path / "gate.toml").write_text("[gate]\nmin_accuracy = 0.999\n")
    result = run(*args, "--gate", "-q")
    assert result.exit_code == 1 and "min_accuracy" in result.output


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("MODEL.onnx",), 2, "MODEL needs a model, but --predictions audits saved predictions"),
        (("--perturbations", "noise"), 2, "--perturbations needs a model, but --predictions audits saved"),
        (("--shift-predictions", "x"), 2, "--shift-predictions must be NAME=FILE"),
        (("--ood-predictions", "missing.npz"), 3, "missing.npz: no such file"),
        (("--reference-predictions", "short.npz"), 3, "short.npz has 10 rows but"),
        (("--reference-predictions", "other_ids.npz"), 3, "the ids differ: id 's0' is missing from"),
        (("--shift-predictions", "a=five.npz"), 3, "five.npz has 5 classes but"),
    ],
)
def test_what_cannot_run_is_one_line_and_writes_nothing(saved, tmp_path, args, code, message):
    np.savez(tmp_path / "short.npz", logits=np.zeros((10, 10)))
    np.savez(tmp_path / "other_ids.npz", logits=np.zeros((10, 10)), ids=np.array([f"t{i}" for i in range(10)]))
    np.savez(tmp_path / "five.npz", logits=np.zeros((4, 5)), labels=np.zeros(4, dtype=int))
    (tmp_path / "r.json").write_text("kept")
    ids = np.array([f"s{i}" for i in range(240)])
    found = {k: v for k, v in np.load(saved / "p.npz").items() if not k.startswith(("ood_", "unlabeled_"))}
    np.savez(tmp_path / "p.npz", **found, **({"ids": ids} if "other_ids.npz" in args else {}))
    os.chdir(tmp_path)
    result = run("evaluate", *(["--predictions", "p.npz"] if args[0] != "MODEL.onnx" else []), *args,
                 *(["--predictions", "p.npz"] if args[0] == "MODEL.onnx" else []), "-o", "r.json")  # fmt: skip
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
    assert (tmp_path / "r.json").read_text() == "kept"


def test_predictions_options_without_predictions_are_refused(onnx_model, tmp_path):
    result = run("evaluate", onnx_model, "--ood-predictions", tmp_path / "o.npz")
    assert result.exit_code == 2 and "--ood-predictions goes with --predictions FILE" in result.output


def test_the_specs_model_options_are_left_out_with_a_warning(saved, tmp_path):
    (tmp_path / "macs-audit.toml").write_text('[evaluate]\nmodel = "m.onnx"\nperturbations = "noise"\nbootstrap = 0\n')
    result = run("evaluate", "--predictions", saved / "p.npz", "--config", tmp_path / "macs-audit.toml", "-o",
                 tmp_path / "r.json")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "the spec's model, perturbations need a model: an audit of --predictions leaves it out" in result.output
    settings = json.loads((tmp_path / "r.json").read_text())["settings"]
    assert settings["options"]["bootstrap"] == {"value": 0, "source": "spec"} and "model" not in settings["options"]


def test_the_whole_process_never_imports_torch(saved, tmp_path):
    code = (
        "import sys\n"
        "from macs_audit.__main__ import main\n"
        f"sys.argv = ['macs-audit', 'evaluate', '--predictions', {str(saved / 'p.npz')!r}, '--bootstrap', '20',"
        f" '-o', {str(tmp_path / 'r.json')!r}, '-q']\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
        "heavy = sorted(m for m in ('torch', 'timm', 'onnxruntime', 'torchvision') if m in sys.modules)\n"
        "print('imported:', heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "imported: []" in result.stdout
    assert json.loads((tmp_path / "r.json").read_text())["clean"]["metrics"]["n"] == 240
