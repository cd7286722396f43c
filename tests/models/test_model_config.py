"""What the loaders tell the user about a model: an ONNX model whose weights file is missing, CIFAR-10's
normalisation applied to a model it does not fit (stderr, report, header), and the logit statistics of
a model that outputs probabilities, labelled as what they measure."""

import json

import numpy as np
import onnx
import pytest
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.errors import InputError
from macs_audit.formats import html, markdown, terminal
from macs_audit.models.config import resolve
from macs_audit.models.predictor import load_predictor
from macs_audit.report import load_report

runner = CliRunner()
QUICK = ["--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--device", "cpu"]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_onnx_model_without_its_external_weights_file_says_to_keep_it_beside(tmp_path):
    model = onnx.load(str(linear_onnx(tmp_path / "plain.onnx")))
    path = tmp_path / "big.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="big.onnx.data", size_threshold=0)
    assert load_predictor(path, device="cpu").num_classes == 10  # loads while the weights file is beside it
    (tmp_path / "big.onnx.data").unlink()
    with pytest.raises(InputError) as info:
        load_predictor(path, device="cpu")
    message = str(info.value)
    assert "\n" not in message and "big.onnx.data" in message and "missing" in message
    assert "keep big.onnx.data next to big.onnx" in message  # through the CLI: tests/cli/test_bad_input.py


def test_a_long_onnxruntime_message_keeps_its_end(tmp_path):
    """onnxruntime names the model's path first and the cause last: a long path must not push the cause out."""
    folder = tmp_path / ("a_rather_long_folder_name_" * 6)
    folder.mkdir()
    model = onnx.load(str(linear_onnx(tmp_path / "plain.onnx")))
    model.graph.node[2].op_type = "NoSuchOp"
    onnx.save(model, str(folder / "broken.onnx"))
    with pytest.raises(InputError) as info:
        load_predictor(folder / "broken.onnx", device="cpu")
    assert "\n" not in str(info.value) and "No Op registered for NoSuchOp" in str(info.value)


def hundred_class_data(tmp_path, n=200):
    x, _ = tiny_images(n)
    y = np.arange(n) % 100
    names = np.array([f"class{i}" for i in range(100)])
    path = tmp_path / "c100.npz"
    np.savez(path, x=x, y=y, fine_names=names)
    return path


@pytest.mark.parametrize(
    "num_classes, size, flags, fits, warned",
    [
        (10, 32, {}, True, False),  # the model's own description says CIFAR-10 at 32x32
        (10, 32, {}, False, True),  # 10 classes at 32x32, but nothing says CIFAR-10 (a torchvision resnet18)
        (100, 32, {}, False, True),
        (100, 32, {}, True, True),  # not CIFAR-10 whatever the loader thought
        (10, 64, {}, False, True),
        (100, 32, {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}, False, False),
        (100, 32, {"mean": [0.5, 0.5, 0.5]}, False, True),  # std still CIFAR-10's
        (None, 32, {}, False, True),  # a model not known to fit: warned at once
    ],
)
def test_normalisation_warning_rule(num_classes, size, flags, fits, warned):
    cfg = resolve({**flags, "input_size": [size, size]}, {}, {})
    cfg.num_classes, cfg.fits_cifar10 = num_classes, fits
    message = cfg.normalisation_warning()
    assert bool(message) == warned, message
    if warned:
        assert "CIFAR-10's" in message and "--mean" in message and "--std" in message
        assert ("mean 0.4914,0.4822,0.4465" in message) == ("mean" not in flags)


def test_hundred_class_model_without_mean_std_is_warned_on_stderr_in_the_report_and_header(tmp_path):
    model = linear_onnx(tmp_path / "c100.onnx", num_classes=100)
    data = hundred_class_data(tmp_path)
    out = tmp_path / "report.json"
    result = run("evaluate", model, "--data", data, "-o", out, *QUICK)
    assert result.exit_code == 0, result.output
    warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and "100-class model" in warning[0] and "--mean" in warning[0]
    report = json.loads(out.read_text())
    assert report["model"]["warnings"] == [warning[0].removeprefix("warning: ")]
    loaded = load_report(out)
    header = markdown.render(loaded)
    assert "32x32, mean 0.4914,0.4822,0.4465, std 0.247,0.2435,0.2616 (CIFAR-10 default)" in header
    assert "100-class model" in html.render(loaded)
    # The class names came from the npz's CIFAR-100 key.
    assert report["data"]["class_names"][:2] == ["class0", "class1"]
    # With the normalisation given, no warning, and the header says what was used.
    out2 = tmp_path / "report2.json"
    result = run(
        "evaluate", model, "--data", data, "-o", out2, "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25", *QUICK
    )
    assert result.exit_code == 0 and "warning:" not in result.stderr
    assert "warnings" not in json.loads(out2.read_text())["model"]
    assert "mean 0.5,0.5,0.5, std 0.25,0.25,0.25 |" in markdown.render(load_report(out2)).replace("·", "|")


def test_ten_class_32px_model_report_has_no_warnings_key(tmp_path, npz_data, onnx_model):
    out = tmp_path / "report.json"
    result = run("evaluate", onnx_model, "--data", npz_data, "-o", out, *QUICK)
    assert result.exit_code == 0 and "warning" not in result.stderr
    assert "warnings" not in json.loads(out.read_text())["model"]


def test_calibrate_inherits_the_normalisation_warning(tmp_path):
    model = linear_onnx(tmp_path / "c100.onnx", num_classes=100)
    data = hundred_class_data(tmp_path)
    result = run("calibrate", model, "--data", data, "--eval-data", data, "--out", tmp_path / "cal", *QUICK)
    assert result.exit_code == 0, result.output
    assert any(line.startswith("warning:") and "100-class" in line for line in result.stderr.splitlines())
    before = json.loads((tmp_path / "cal" / "audit_before.json").read_text())
    assert "100-class model" in before["model"]["warnings"][0]


def test_probability_outputs_label_the_log_probability_statistics(tmp_path, npz_data):
    probs = linear_onnx(tmp_path / "probs.onnx", softmax=True)
    out = tmp_path / "report.json"
    result = run("evaluate", probs, "--data", npz_data, "-o", out, *QUICK)
    assert result.exit_code == 0, result.output
    report = load_report(out)
    assert report.model.output == "probabilities (detected)"
    for text in (result.stdout, terminal.render(report), markdown.render(report), html.render(report)):
        text = text.replace("\\", "")  # Markdown escapes | and _
        assert "mean ||log p||_2" in text and "mean max log p" in text
        assert "||z||" not in text and "max logit" not in text
    # A logits model keeps the logit labels.
    out2 = tmp_path / "logits.json"
    assert run("evaluate", linear_onnx(tmp_path / "z.onnx"), "--data", npz_data, "-o", out2, *QUICK).exit_code == 0
    logits = load_report(out2)
    assert "mean ||z||_2" in terminal.render(logits) and "log p" not in markdown.render(logits)
    # Compared, the row names both where the two models differ.
    from macs_audit.compare import compare

    titles = {row.key: row.label for row in compare(logits, report).rows}
    assert titles["mean_logit_norm"] == "mean ||z||_2 / ||log p||_2"
    assert {row.key: row.label for row in compare(report, report).rows}["mean_max_logit"] == "mean max log p"


@pytest.mark.parametrize(
    "layer,key,value,message",
    [
        ("metadata", "num_classes", "abc", "num_classes must be a whole number, got 'abc' from the model's ONNX"),
        ("sidecar", "num_classes", 10.5, "num_classes must be a whole number, got 10.5 from the model's sidecar"),
        ("sidecar", "mean", [float("nan")] * 3, "mean must be a list of finite numbers, one per channel, got [nan"),
        ("flag", "std", [1.0, float("inf"), 1.0], "std must be a list of finite numbers, one per channel"),
        ("sidecar", "input_size", "big", "input_size must be [height, width] (or one number), got 'big' from the"),
        ("metadata", "input_size", [60000, 60000], "input_size 60000x60000 from the model's ONNX metadata is larger"),
        ("flag", "input_size", [32, 4097], "input_size 32x4097 from --input-size is larger than 4096x4096"),
    ],
)
def test_each_setting_is_checked_on_its_own_naming_where_it_was_set(layer, key, value, message):
    from macs_audit.errors import UsageError

    layers = {"flag": {}, "sidecar": {}, "metadata": {}}
    layers[layer][key] = value
    with pytest.raises(UsageError) as caught:
        resolve(layers["flag"], layers["sidecar"], layers["metadata"])
    assert message in str(caught.value)


def test_settings_json_may_carry_whole_numbers_as_floats_or_strings():
    cfg = resolve({}, {"input_size": [64.0, "64"], "num_classes": "100"}, {})
    assert cfg.input_size == (64, 64) and cfg.num_classes == 100


def test_a_sidecar_nested_too_deeply_is_an_input_error(tmp_path):
    linear_onnx(tmp_path / "m.onnx")
    (tmp_path / "m.json").write_text("{" + '"a": {' * 50_000 + "}" * 50_001)
    with pytest.raises(InputError, match=r"sidecar .*m\.json: JSON nested too deeply"):
        load_predictor(tmp_path / "m.onnx", device="cpu")


def test_model_args_must_be_an_object_free_of_the_class_count():
    from macs_audit.errors import UsageError

    assert resolve({}, {"model_args": {"global_pool": "max"}}, {}).sources["model_args"] == "sidecar"
    with pytest.raises(UsageError, match="model_args must be a JSON object of the architecture's keyword arguments"):
        resolve({}, {"model_args": "deep"}, {})
    with pytest.raises(UsageError, match="free of num_classes"):
        resolve({}, {"model_args": {"num_classes": 5}}, {})
