"""`finetune` fits its temperatures on data the start model never saw, or refuses: a model trained on all of a
small training set (made here) memorised the split `finetune` would hold out of it."""

import json

import numpy as np
import pytest
import timm
import torch
from conftest import tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.models import architectures  # noqa: F401
from macs_audit.models.export import save_safetensors, write_sidecar

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SIZE = 16
runner = CliRunner()


def noisy(n, seed):
    """Tiny images whose labels are half random: learnable in part, memorisable in full."""
    x, y = tiny_images(n, seed=seed, size=SIZE)
    rng = np.random.default_rng(seed + 100)
    flip = rng.random(n) < 0.5
    return x, np.where(flip, rng.integers(0, 10, n), y)


@pytest.fixture(scope="module")
def memorised(tmp_path_factory):
    """A ResNet-9 trained on all 300 images of train.npz to 100% (plain CE, 40 epochs; 100% from the 35th on): the
    finetune default split of that file is memorised; val.npz and test.npz are fresh draws."""
    folder = tmp_path_factory.mktemp("memorised")
    x, y = noisy(300, 0)
    np.savez(folder / "train.npz", x=x, y=y)
    for name, seed in (("val", 1), ("test", 2)):
        np.savez(folder / f"{name}.npz", **dict(zip(("x", "y"), noisy(300, seed), strict=True)))
    torch.manual_seed(0)
    model = timm.create_model("macs_resnet9_c10", num_classes=10)
    images = torch.from_numpy(x).permute(0, 3, 1, 2).float().div(255)
    images = (images - images.mean((0, 2, 3), keepdim=True)) / images.std((0, 2, 3), keepdim=True)
    labels = torch.from_numpy(y)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(40):
        for batch in torch.randperm(300, generator=torch.Generator().manual_seed(_)).split(50):
            loss = torch.nn.functional.cross_entropy(model(images[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        assert (model(images).argmax(1) == labels).float().mean() > 0.97  # memorised
    mean = images.new_tensor(x.reshape(-1, 3).mean(0) / 255).tolist()
    std = images.new_tensor(x.reshape(-1, 3).std(0) / 255).tolist()
    save_safetensors(model, folder / "start.safetensors")
    sidecar = {"arch": "macs_resnet9_c10", "num_classes": 10, "input_size": [SIZE, SIZE], "mean": mean, "std": std}
    write_sidecar(folder / "start.json", sidecar)
    return folder


def finetune_args(folder, out, *extra):
    args = ["finetune", str(folder / "start.safetensors"), "--data", str(folder / "train.npz")]
    args += ["--eval-data", str(folder / "test.npz"), "--out", str(out), "--objective", "ce", "--epochs", "1"]
    args += ["--batch-size", "32", "--lr", "0.001", "--device", "cpu", "--bootstrap", "0", "--quiet"]
    return [*args, "--perturbations", "none", "--corruptions", "none", "--sensitivity-samples", "0", *extra]


def test_the_memorised_split_is_caught_and_nothing_is_written(memorised):
    out = memorised / "caught"
    result = runner.invoke(app, finetune_args(memorised, out))
    assert result.exit_code == 2, result.output
    message = " ".join(result.output.split())
    assert "the validation split held out of the training data looks trained on" in message
    assert "--val-data" in message and "--force-temperature" in message
    assert not out.exists()


def test_with_val_data_the_temperature_is_fitted_there_and_not_refused(memorised):
    out = memorised / "honest"
    result = runner.invoke(app, finetune_args(memorised, out, "--val-data", str(memorised / "val.npz")))
    assert result.exit_code == 0, result.output
    config = json.loads((out / "finetune_config.json").read_text())
    assert config["temperature"]["fit_data"] == "--val-data set" and config["temperature"]["n"] == 300
    assert config["temperature_only"]["temperature"] > 1  # the honest fit softens the overconfident model
    assert "Which fix" in result.output


def test_force_temperature_folds_it_with_a_warning_and_no_which_fix_table(memorised):
    out = memorised / "forced"
    result = runner.invoke(app, finetune_args(memorised, out, "--force-temperature"))
    assert result.exit_code == 0, result.output
    assert "looks trained on" in " ".join(result.stderr.split()) and "Which fix" not in result.output
    assert "Which fix" not in (out / "audit_comparison.md").read_text()


def test_from_scratch_the_split_is_honest_for_the_new_model_and_only_the_start_models_fix_is_dropped(memorised):
    """--from-scratch trains a fresh model without the held-out split, so its folded T is honest: the run goes
    on, warns that the start model's temperature-only fix was fitted on data it had seen, and shows no table."""
    out = memorised / "scratch"
    result = runner.invoke(app, finetune_args(memorised, out, "--from-scratch"))
    assert result.exit_code == 0, result.output
    assert "looks trained on" in " ".join(result.stderr.split()) and "Which fix" not in result.output
    assert (out / "model.safetensors").is_file()
