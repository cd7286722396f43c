"""PyTorch checkpoints as users bring them: training-checkpoint wrappers and key prefixes, damaged files,
mismatched keys named in one line, and torch's own warnings kept off stderr unless --debug."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import timm
import torch
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.errors import InputError, UsageError
from macs_audit.models.backend import one_line, summarise_keys
from macs_audit.models.predictor import load_predictor
from macs_audit.models.torch import strip_wrapper_prefix

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def resnet18():
    """A real timm architecture (not one of the project's), 10 classes, random weights."""
    torch.manual_seed(0)
    return timm.create_model("resnet18", num_classes=10).eval()


def lightning_checkpoint(path, model, prefix="model."):
    """What `pytorch_lightning.Trainer.save_checkpoint` writes for a LightningModule holding `self.model`."""
    torch.save(
        {
            "epoch": 3,
            "global_step": 1200,
            "pytorch-lightning_version": "2.4.0",
            "state_dict": {prefix + k: v for k, v in model.state_dict().items()},
            "optimizer_states": [{"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}],
            "lr_schedulers": [],
            "hyper_parameters": {"lr": 0.1, "arch": "resnet18"},
        },
        path,
    )
    return path


@pytest.mark.parametrize(
    "prefix", ["model.", "net.", "backbone.", "module.", "_orig_mod.", "model._orig_mod.", "module.model."]
)
def test_wrapper_prefix_is_stripped_when_the_rest_fits(tmp_path, resnet18, prefix):
    path = lightning_checkpoint(tmp_path / "epoch=3.ckpt", resnet18, prefix)
    predictor = load_predictor(path, {"arch": "resnet18"}, device="cpu")
    assert predictor.info["checkpoint_prefix_stripped"] == prefix
    assert predictor.config.num_classes == 10  # read off fc.weight once the prefix is off
    x = np.random.default_rng(0).random((4, 3, 32, 32), dtype=np.float32)
    with torch.no_grad():
        expected = resnet18(_normalised(x))
    np.testing.assert_allclose(predictor.predict(x), expected.numpy(), rtol=1e-5, atol=1e-5)


def _normalised(x):
    from macs_audit.models.config import CIFAR10_MEAN, CIFAR10_STD

    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    return (torch.from_numpy(x) - mean) / std


def test_lightning_checkpoint_evaluates_and_the_report_says_what_was_stripped(tmp_path, resnet18, npz_data):
    path = lightning_checkpoint(tmp_path / "last.ckpt", resnet18)
    out = tmp_path / "report.json"
    args = ["evaluate", str(path), "--arch", "resnet18", "--data", str(npz_data), "-o", str(out)]
    result = runner.invoke(app, [*args, "--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0"])
    assert result.exit_code == 0, result.output
    model = json.loads(out.read_text())["model"]
    assert model["checkpoint_prefix_stripped"] == "model." and model["format"] == "state-dict"
    from macs_audit.formats import markdown
    from macs_audit.report import load_report

    assert "key prefix 'model.' stripped" in markdown.render(load_report(out))


def test_a_prefix_is_not_stripped_when_the_keys_fit_as_saved():
    expected = {"model.weight", "model.bias"}
    state = {"model.weight": 1, "model.bias": 2}
    assert strip_wrapper_prefix(state, expected) == (state, "")
    # Not every key has the prefix: nothing is stripped, whatever fits better.
    mixed = {"model.weight": 1, "loss.weight": 2}
    assert strip_wrapper_prefix(mixed, {"weight"}) == (mixed, "")


def test_keys_that_do_not_fit_are_counted_and_named_in_one_line(tmp_path, resnet18):
    # A Lightning module that also saved its loss's buffer: not every key has "model.", so nothing is stripped.
    path = tmp_path / "mixed.ckpt"
    state = {"model." + k: v for k, v in resnet18.state_dict().items()}
    state["criterion.weight"] = torch.ones(10)
    torch.save({"state_dict": state, "epoch": 1}, path)
    with pytest.raises(InputError) as info:
        load_predictor(path, {"arch": "resnet18", "num_classes": 10}, device="cpu")
    message = str(info.value)
    assert "\n" not in message
    n = len(resnet18.state_dict())
    assert f"{n} missing keys (conv1.weight, bn1.weight, bn1.bias, ...)" in message
    assert f"{n + 1} extra keys (model.conv1.weight, model.bn1.weight, model.bn1.bias, ...)" in message
    # Stripped, but for another architecture: what is missing is named after the stripping.
    lightning_checkpoint(tmp_path / "r18.ckpt", resnet18)
    with pytest.raises(InputError, match=r"prefix 'model\.' stripped\) does not fit resnet34 .* missing keys"):
        load_predictor(tmp_path / "r18.ckpt", {"arch": "resnet34", "num_classes": 10}, device="cpu")
    # Another class count: the shapes that differ are named with both shapes.
    with pytest.raises(InputError, match=r"fc\.weight: \[10, 512\] in the checkpoint, \[100, 512\] in the model"):
        load_predictor(tmp_path / "r18.ckpt", {"arch": "resnet18", "num_classes": 100}, device="cpu")


def test_one_line_keeps_the_cause_at_the_end_of_a_long_message():
    long = "Error(s) in loading state_dict:\n\t" + "x" * 1000 + "\n\tUnexpected key(s): model.fc.weight"
    line = one_line(long)
    assert "\n" not in line and len(line) <= 400
    assert line.startswith("Error(s) in loading state_dict:") and line.endswith("Unexpected key(s): model.fc.weight")
    assert one_line("\x1b[1mbold\x1b[0m  and\n  spaced") == "bold and spaced"
    assert summarise_keys(["a"], "missing") == "1 missing key (a)"


def random_bytes(path, n=4096, seed=0):
    path.write_bytes(np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes())
    return path


@pytest.mark.parametrize("trust", [False, True])
@pytest.mark.parametrize(
    "make, cause",
    [
        (lambda p: random_bytes(p), "no readable pickle data"),
        (lambda p: random_bytes(p, seed=1), "no readable pickle data"),
        (lambda p: p.write_bytes(b""), "the file is empty"),
        (lambda p: p.write_bytes(b"\x80\x02}q\x00(X\x01\x00\x00\x00a"), "the file ends too early"),
        (lambda p: _truncated_zip(p), "PytorchStreamReader"),
    ],
    ids=["random", "random-2", "empty", "truncated-pickle", "truncated-zip"],
)
def test_a_damaged_file_is_a_corrupt_checkpoint_not_a_pickled_object(tmp_path, make, cause, trust):
    path = tmp_path / "weights.pt"
    make(path)
    with pytest.raises(InputError) as info:
        load_predictor(path, {"arch": "resnet18"}, device="cpu", allow_unsafe_pickle=trust)
    message = str(info.value)
    assert message.startswith(f"cannot read PyTorch checkpoint {path}: not a valid checkpoint (")
    assert cause in message and "--trust-pickled-model-code" not in message and "pickled Python" not in message


def _truncated_zip(path):
    torch.save({"w": torch.zeros(100)}, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_pickled_module_names_its_class_and_the_flag(tmp_path):
    path = tmp_path / "module.pt"
    torch.save(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3, 10)), path)
    with pytest.raises(InputError) as info:
        load_predictor(path, device="cpu")
    message = str(info.value)
    assert "holds a pickled Python object (torch.nn.modules.container.Sequential)" in message
    assert "--trust-pickled-model-code" in message
    assert load_predictor(path, device="cpu", allow_unsafe_pickle=True).info["format"] == "pickled-module"


def torchscript(path):
    module = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace's own deprecation
        torch.jit.trace(module, torch.zeros(1, 3, 32, 32)).save(str(path))
    return path


@pytest.mark.parametrize("debug", [False, True])
def test_torch_warnings_while_loading_show_only_with_debug(tmp_path, debug):
    path = torchscript(tmp_path / "ts.pt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_predictor(path, device="cpu", debug=debug)
    shown = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert bool(shown) == debug, shown  # torch.jit.load's FutureWarning


@pytest.mark.slow
def test_cli_stderr_has_no_torch_warning_lines_without_debug(tmp_path, npz_data):
    """As a user runs it (a real process, where Python prints warnings to stderr)."""
    model = torchscript(tmp_path / "ts.pt")
    args = [sys.executable, "-m", "macs_audit", "evaluate", str(model), "--data", str(npz_data)]
    args += ["--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--device", "cpu"]
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    quiet = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "Warning" not in quiet.stderr and "warnings.warn" not in quiet.stderr, quiet.stderr
    debug = subprocess.run([*args[:3], "--debug", *args[3:]], capture_output=True, text=True, env=env, timeout=300)
    assert debug.returncode == 0, debug.stderr
    assert "FutureWarning" in debug.stderr and "torch.jit.load" in debug.stderr


def test_precision_selection():
    """--precision: fp32 (no autocast) everywhere; bf16 / fp16 are CUDA autocast and refused elsewhere, as is a
    name that is none of them. The CUDA side runs in tests/test_gpu.py."""
    from macs_audit.models.torch import autocast_dtype

    assert autocast_dtype("fp32", torch.device("cpu")) is None
    for precision in ("bf16", "fp16"):
        with pytest.raises(UsageError, match=f"--precision {precision} runs torch models under CUDA autocast"):
            autocast_dtype(precision, torch.device("cpu"))
    with pytest.raises(UsageError, match="--precision must be one of fp32, bf16, fp16"):
        autocast_dtype("fp64", torch.device("cpu"))
