"""The portable calibration map (calibrators/portable.py): every method's fitted numbers through JSON and back to
the same transform, bit for bit; apply_calibration in each input convention; a bad map in one line; `calibrate
--predictions` on a scikit-learn classifier's real held-out scores (no torch in the process); and `calibrate MODEL
--map` folding the map into an ONNX model, refused where the map does not fit the model."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.calibrating import choose_calibrator
from macs_audit.calibrators.base import METHODS, fit_calibrator
from macs_audit.calibrators.common import softmax
from macs_audit.calibrators.portable import (
    FORMAT,
    CalibrationMap,
    apply_calibration,
    calibration_map,
    read_calibration_map,
)
from macs_audit.cli import app
from macs_audit.errors import InputError
from macs_audit.predictions.files import read_predictions

runner = CliRunner()
K = 4


def _scores(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Overconfident logits (K classes, about 70% right) and their labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, K, n)
    logits = 3 * rng.normal(size=(n, K)) + 4 * np.eye(K)[labels]
    return logits, labels


def _map(calibrator, **given) -> dict:
    facts = {"class_names": None, "input_kind": "logits", "binary": False, "selection": {}}
    return calibration_map(calibrator, **{**facts, **given})


@pytest.mark.parametrize("method", METHODS)
def test_every_method_comes_back_from_json_with_the_same_transform_bit_for_bit(method, tmp_path):
    logits, labels = _scores(600, seed=0)
    calibrator = fit_calibrator(method, logits, labels)
    path = tmp_path / "map.json"
    path.write_text(json.dumps(_map(calibrator, class_names=["a", "b", "c", "d"])))
    rebuilt = read_calibration_map(path)
    assert type(rebuilt.calibrator) is type(calibrator) and rebuilt.class_names == ["a", "b", "c", "d"]
    assert rebuilt.calibrator.describe() == calibrator.describe()
    new, _ = _scores(300, seed=1)
    # The same code on the same float64 numbers (JSON keeps each exactly): the same bits.
    assert np.array_equal(rebuilt.calibrator.transform(new), calibrator.transform(new))
    np.testing.assert_allclose(apply_calibration(path, new), softmax(calibrator.transform(new)), rtol=0, atol=1e-12)
    assert apply_calibration(path, new).dtype == np.float64


def test_probabilities_and_a_binary_single_column_are_read_as_the_prediction_files_read_them():
    rng = np.random.default_rng(2)
    logits, labels = _scores(500, seed=3)
    p = softmax(logits)
    calibrator = fit_calibrator("dirichlet", np.log(p), labels)
    fitted = _map(calibrator, input_kind="probabilities")
    np.testing.assert_allclose(apply_calibration(fitted, p), softmax(calibrator.transform(np.log(p))), atol=1e-12)
    # A binary classifier's positive-class logit z is the two logits (0, z); its probability q is (1 - q, q).
    z = rng.normal(size=400) * 4
    y = (rng.random(400) < 1 / (1 + np.exp(-z / 3))).astype(np.int64)
    two = np.stack([np.zeros_like(z), z], axis=1)
    binary = fit_calibrator("temperature", two, y)
    by_logit = _map(binary, binary=True)
    expected = softmax(binary.transform(two))
    np.testing.assert_allclose(apply_calibration(by_logit, z), expected, atol=1e-12)
    np.testing.assert_allclose(apply_calibration(by_logit, z[:, None]), expected, atol=1e-12)
    q = 1 / (1 + np.exp(-z))
    by_probability = _map(fit_calibrator("isotonic", np.log(np.stack([1 - q, q], 1)), y), binary=True)
    by_probability["inputs"] = "probabilities"
    isotonic = read_calibration_map(by_probability)
    assert isinstance(isotonic, CalibrationMap)
    np.testing.assert_allclose(
        apply_calibration(isotonic, q),
        softmax(isotonic.calibrator.transform(np.log(np.stack([1 - q, q], 1)))),
        atol=1e-12,
    )


def _edited(method: str, edit) -> dict:
    logits, labels = _scores(600, seed=0)
    record = json.loads(json.dumps(_map(fit_calibrator(method, logits, labels))))
    edit(record)
    return record


BAD_MAPS = [
    ("a list", lambda r: r.clear(), "not a calibration map"),
    ("another format", lambda r: r.update(format="something else"), "not a calibration map"),
    ("a newer version", lambda r: r.update(version=2), "format version 2 is not 1, the version this macs-audit reads"),
    ("no parameters", lambda r: r.pop("parameters"), "missing 'parameters'"),
    ("an unknown method", lambda r: r.update(method="platt"), "unknown method 'platt'"),
    ("one class", lambda r: r.update(n_classes=1), "'n_classes' must be a whole number of at least 2"),
    ("too few names", lambda r: r.update(class_names=["a", "b"]), "'class_names' must be null or 4 different"),
    ("binary of 4 classes", lambda r: r.update(binary=True), "'binary' must be true (a single column, 2 classes)"),
    ("unknown inputs", lambda r: r.update(inputs="scores"), "'inputs' is 'scores'"),
    ("parameters not an object", lambda r: r.update(parameters=[1.5]), "'parameters' must be a JSON object"),
    ("a fit record not an object", lambda r: r.update(fit="digits.npz"), "'fit' must be a JSON object"),
    ("warnings not a list", lambda r: r.update(warnings="careful"), "'warnings' must be a list of strings"),
]


@pytest.mark.parametrize(("case", "edit", "message"), BAD_MAPS, ids=[case for case, _, _ in BAD_MAPS])
def test_a_map_that_is_not_one_is_refused_in_one_line(case, edit, message):
    record = _edited("temperature", edit)
    with pytest.raises(InputError) as error:
        read_calibration_map(record)
    assert message in str(error.value) and "\n" not in str(error.value)


BAD_NUMBERS = [
    ("vector", lambda p: p.update(bias=p["bias"][:3]), "'bias' must be of shape (4), not (3,)"),
    ("matrix", lambda p: p["weights"][0].pop(), "'weights' must be an array of shape (4, 4)"),
    ("matrix", lambda p: p["weights"][1].__setitem__(2, float("nan")), "'weights' must be finite numbers"),
    ("temperature", lambda p: p.update(temperature=-1.0), "'temperature' must be positive"),
    ("temperature", lambda p: p.update(temperature="2"), "'temperature' must be a finite number"),
    ("isotonic", lambda p: p["thresholds"][0].reverse(), "'thresholds' must be non-decreasing"),
    ("isotonic", lambda p: p["options"].update(min_probability=0.5), "'min_probability' must be in [0, 1/4)"),
    ("histogram", lambda p: p.update(edges=p["edges"][:2]), "'edges' must be of shape (4, 16), not (2, 16)"),
    ("dirichlet", lambda p: p.pop("optimizer"), "has no parameter 'optimizer'"),
]


@pytest.mark.parametrize(("method", "edit", "message"), BAD_NUMBERS)
def test_numbers_that_do_not_make_the_method_are_refused_in_one_line(method, edit, message):
    record = _edited(method, lambda r: edit(r["parameters"]))
    with pytest.raises(InputError) as error:
        read_calibration_map(json.loads(json.dumps(record)))
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_a_file_that_is_not_a_map_and_scores_that_do_not_fit_it_are_refused_in_one_line(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    for name, message in (("bad.json", "not valid JSON"), ("list.json", "not a calibration map"), ("no.json", "")):
        with pytest.raises(InputError) as error:
            apply_calibration(tmp_path / name, np.zeros((2, K)))
        assert f"calibration map {tmp_path / name}" in str(error.value) and message in str(error.value)
        assert "\n" not in str(error.value)
    logits, labels = _scores(600, seed=0)
    fitted = _map(fit_calibrator("temperature", logits, labels), class_names=list("abcd"))
    probabilities = {**fitted, "inputs": "probabilities"}
    binary = _map(fit_calibrator("temperature", logits[:, :2], (labels % 2)), binary=True)
    for the_map, scores, message in (
        (fitted, np.zeros((3, 5)), "fitted on 4 classes (a, b, c, d); give logits of shape (N, 4), got (3, 5)"),
        (fitted, np.full((3, K), np.nan), "hold 12 NaN or infinite values, the first at row 0, column 0"),
        (fitted, np.array([["a"] * K]), "logits must be numbers, got <U1"),
        (probabilities, logits[:3], "probabilities must lie in [0, 1]; 3 rows do not"),
        (probabilities, np.full((2, K), 0.5), "probabilities must sum to 1 per row (within 0.001); 2 rows do not"),
        (binary, np.zeros((3, 2)), "a binary classifier's one column (logits of the positive class); give shape"),
    ):
        with pytest.raises(InputError) as error:
            apply_calibration(the_map, scores)
        assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


def test_a_map_folds_into_a_model_of_its_classes_and_of_scores_it_reads_alike():
    logits, labels = _scores(600, seed=0)
    names = ["cat", "dog", "fox", "owl"]
    temperature = read_calibration_map(_map(fit_calibrator("temperature", logits, labels), class_names=names))
    vector = read_calibration_map(_map(fit_calibrator("vector", logits, labels), input_kind="probabilities"))
    temperature.check_model("m.onnx", 4, names, "probabilities")  # reads only the softmax: logits or log p alike
    temperature.check_model("m.onnx", 4, None, None)  # an unnamed model's outputs are taken in the map's order
    vector.check_model("m.onnx", 4, names, "probabilities")
    for the_map, args, message in (
        (temperature, (5, None, "logits"), "fitted on 4 classes but m.onnx has 5 outputs"),
        (temperature, (4, ["a", "b", "c", "d"], "logits"), "classes (cat, dog, fox, owl) are not m.onnx's (a, b,"),
        (temperature, (4, names[::-1], "logits"), "are not m.onnx's (owl, fox, dog, cat) in another order"),
        (vector, (4, None, "logits"), "a vector scaling map fitted on probabilities does not fold into m.onnx"),
    ):
        with pytest.raises(InputError) as error:
            the_map.check_model("m.onnx", *args)
        assert message in str(error.value) and "\n" not in str(error.value), str(error.value)
    binary = _map(fit_calibrator("vector", logits[:, :2], labels % 2), binary=True)
    with pytest.raises(InputError, match="fitted on logits of a binary classifier's one column does not fold"):
        read_calibration_map(binary).check_model("m.onnx", 2, None, "logits")
    read_calibration_map({**binary, "method": "temperature", "parameters": {"temperature": 2.0}}).check_model(
        "m.onnx", 2, None, "logits"
    )


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    """A scikit-learn logistic regression's logits on 1,097 held-out handwritten digits (load_digits: real data, 10
    classes), trained on the other 700: an .npz of logits, labels and class names, as a team would save them."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    train, held_out = order[:700], order[700:]
    classifier = LogisticRegression(max_iter=2000).fit(x[train] / 16, y[train])
    path = tmp_path_factory.mktemp("digits") / "digits.npz"
    names = np.array([f"digit {d}" for d in range(10)])
    np.savez(path, logits=classifier.decision_function(x[held_out] / 16), labels=y[held_out], class_names=names)
    return path


def test_calibrate_predictions_writes_the_map_the_same_fit_gives_and_refuses_to_replace_it(digits, tmp_path):
    out = tmp_path / "maps"
    args = ["calibrate", "--predictions", str(digits), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "uncalibrated" in result.stdout and "calibration map written to" in result.stderr
    written = json.loads((out / "calibration_map.json").read_text())
    assert written["format"] == FORMAT and written["method"] == "temperature" and written["inputs"] == "logits"
    assert written["class_names"] == [f"digit {d}" for d in range(10)] and written["binary"] is False
    assert written["fit"]["source"] == "digits.npz" and written["fit_size"] == written["fit"]["n_fitted_on"] == 1097
    selection = written["selection"]
    assert selection["selected"] == "temperature" and selection["n_fit"] + selection["n_eval"] == 1097
    assert written["fit"]["nll_after"] < written["fit"]["nll_before"]
    # The map is the fit calibrate makes in the process, to the bit.
    found = read_predictions(digits)
    calibrator, _, _ = choose_calibrator(found.logits, found.labels, ["temperature"], "nll", 0.3, 0)
    rebuilt = read_calibration_map(out / "calibration_map.json").calibrator
    assert np.array_equal(rebuilt.transform(found.logits), calibrator.transform(found.logits))
    # An existing map is replaced only with --force; the predictions never.
    before = (out / "calibration_map.json").read_bytes()
    again = runner.invoke(app, [*args, "--method", "all"])
    assert again.exit_code == 2 and "pass --force" in again.stderr
    assert (out / "calibration_map.json").read_bytes() == before
    forced = runner.invoke(app, [*args, "--method", "vector,matrix", "--force"])
    assert forced.exit_code == 0, forced.output
    assert json.loads((out / "calibration_map.json").read_text())["method"] in ("vector", "matrix")
    into_input = runner.invoke(app, ["calibrate", "--predictions", str(digits), "--out", str(digits.parent)])
    assert into_input.exit_code == 0, into_input.output  # beside the predictions, not over them
    assert read_predictions(digits).logits.shape == (1097, 10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model.onnx", "--predictions", "p.npz"], "give MODEL or --predictions, not both"),
        (["--map", "m.json"], "--map folds a calibration map into a model: give MODEL"),
        (["--predictions", "p.npz", "--map", "m.json"], "--map and --predictions do not go together"),
        (["--predictions", "p.npz", "--data", "d.npz"], "--data is not read with --predictions"),
        (["model.onnx", "--map", "m.json", "--data", "d.npz"], "--data is not read with --map"),
        ([], "give MODEL (with --data, the fit data, or --map) to calibrate a model, or --predictions FILE"),
        (["model.onnx"], "give --data, or data in the spec's calibrate table"),
    ],
)
def test_one_calibration_is_asked_for(args, message, tmp_path):
    result = runner.invoke(app, ["calibrate", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.stderr.split()) and not (tmp_path / "out").exists()


def test_calibrate_predictions_imports_no_torch_in_the_whole_process(digits, tmp_path):
    """`python -m macs_audit calibrate --predictions`, start-up included: torch, onnxruntime and timm never load."""
    found = tmp_path / "modules.json"
    script = (
        "import atexit, json, runpy, sys\n"
        "heavy = ('torch', 'onnxruntime', 'timm')\n"
        f"atexit.register(lambda: open({str(found)!r}, 'w').write(json.dumps(sorted(\n"
        "    m for m in sys.modules if m.split('.')[0] in heavy))))\n"
        f"sys.argv = ['macs-audit', 'calibrate', '--predictions', {str(digits)!r}, '--out', {str(tmp_path / 'o')!r}]\n"
        "runpy.run_module('macs_audit', run_name='__main__')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o" / "calibration_map.json").is_file()
    assert json.loads(found.read_text()) == []


def _overconfident_onnx(path: Path, scale: float = 60.0, softmax_output: bool = False) -> Path:
    """A linear ONNX classifier that learned the colour -> label rule of tiny_images, its logits blown up."""
    import onnx
    from onnx import numpy_helper

    x, y = tiny_images(400, seed=5)
    features = np.c_[x.mean(axis=(1, 2)) / 255.0, np.ones(len(x))]
    w, *_ = np.linalg.lstsq(features, np.eye(10)[y], rcond=None)
    linear_onnx(path, softmax=softmax_output, metadata={"macs_audit.mean": "[0, 0, 0]", "macs_audit.std": "[1, 1, 1]"})
    model = onnx.load(str(path))
    for init in model.graph.initializer:
        value = {"w": w[:3], "b": w[3]}.get(init.name)
        if value is not None:
            init.CopyFrom(numpy_helper.from_array((value * scale).astype(np.float32), init.name))
    onnx.save(model, str(path))
    return path


def _scores_of(model: Path, x: np.ndarray) -> np.ndarray:
    from macs_audit.models.predictor import load_predictor

    return load_predictor(model, device="cpu").predict(x.transpose(0, 3, 1, 2).astype(np.float32) / 255)


QUICK = ["--device", "cpu", "--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "-q"]


def test_calibrate_model_with_map_folds_the_map_and_refuses_one_that_does_not_fit(tmp_path):
    model = _overconfident_onnx(tmp_path / "model.onnx")
    x_fit, y_fit = tiny_images(300, seed=1)
    x_test, y_test = tiny_images(200, seed=2)
    np.savez(tmp_path / "test.npz", x=x_test, y=y_test)
    np.savez(tmp_path / "predictions.npz", logits=_scores_of(model, x_fit), labels=y_fit)
    predictions = ["calibrate", "--predictions", str(tmp_path / "predictions.npz"), "--out", str(tmp_path / "maps")]
    assert runner.invoke(app, predictions).exit_code == 0
    the_map = tmp_path / "maps" / "calibration_map.json"
    args = ["calibrate", str(model), "--map", str(the_map), "--eval-data", str(tmp_path / "test.npz"), *QUICK]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "cal")])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert record["map"] == str(the_map) and record["fit_data"]["map"] == "calibration_map.json"
    assert record["fit_data"]["source"] == "predictions.npz" and record["method"] == "temperature"
    assert record["selection"]["selected"] == "temperature" and record["fit_nll_after"] < record["fit_nll_before"]
    # The calibrated model gives what apply_calibration gives the model's logits (float32 in ONNX).
    calibrated = softmax(_scores_of(tmp_path / "cal" / "model_calibrated.onnx", x_test))
    expected = apply_calibration(the_map, _scores_of(model, x_test))
    np.testing.assert_allclose(calibrated, expected, atol=1e-5)
    # A model of another class count: refused in one line, nothing written.
    five = linear_onnx(tmp_path / "five.onnx", num_classes=5)
    args = ["calibrate", str(five), "--map", str(the_map), "--eval-data", str(tmp_path / "test.npz")]
    refused = runner.invoke(app, [*args, *QUICK, "--out", str(tmp_path / "no")])
    assert refused.exit_code == 3, refused.output
    message = refused.stderr.strip()
    assert "the calibration map was fitted on 10 classes but" in message and "has 5 outputs" in message
    assert len(message.splitlines()) == 1 and not (tmp_path / "no").exists()


def test_a_map_fitted_on_probabilities_folds_into_a_model_that_outputs_them(tmp_path):
    """The predictor reads a model's probabilities as their logarithm, as the prediction files do: the map fitted
    on saved probabilities gives the calibrated model's probabilities. A vector scaling map, whose output changes
    when a number is added to a row of its inputs, is refused for a model of logits."""
    model = _overconfident_onnx(tmp_path / "probs.onnx", scale=30.0, softmax_output=True)
    x_fit, y_fit = tiny_images(300, seed=1)
    x_test, y_test = tiny_images(200, seed=2)
    np.savez(tmp_path / "test.npz", x=x_test, y=y_test)
    np.savez(tmp_path / "p.npz", probabilities=np.exp(_scores_of(model, x_fit)), labels=y_fit)
    predictions = ["calibrate", "--predictions", str(tmp_path / "p.npz"), "--out", str(tmp_path / "m")]
    assert runner.invoke(app, predictions).exit_code == 0
    the_map = tmp_path / "m" / "calibration_map.json"
    assert json.loads(the_map.read_text())["inputs"] == "probabilities"
    args = ["calibrate", str(model), "--map", str(the_map), "--eval-data", str(tmp_path / "test.npz"), *QUICK]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "cal")])
    assert result.exit_code == 0, result.output
    calibrated = softmax(_scores_of(tmp_path / "cal" / "probs_calibrated.onnx", x_test))
    expected = apply_calibration(the_map, np.exp(_scores_of(model, x_test)).astype(np.float64))
    np.testing.assert_allclose(calibrated, expected, atol=1e-5)
    vector = runner.invoke(app, [*predictions, "--method", "vector", "--force-calibration", "--force"])
    assert vector.exit_code == 0, vector.output
    logits_model = _overconfident_onnx(tmp_path / "logits.onnx")
    args = ["calibrate", str(logits_model), "--map", str(the_map), "--eval-data", str(tmp_path / "test.npz")]
    refused = runner.invoke(app, [*args, *QUICK, "--out", str(tmp_path / "no")])
    assert refused.exit_code == 3, refused.output
    assert "a vector scaling map fitted on probabilities does not fold into" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "no").exists()
