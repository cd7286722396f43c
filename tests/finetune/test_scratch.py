"""`finetune --from-scratch`: the architecture's own seeded initialisation, the sample model's schedule."""

import json

import numpy as np
import pytest
import timm
import torch
from conftest import tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.errors import UsageError
from macs_audit.finetune.options import FROM_SCRATCH, FinetuneOptions
from macs_audit.finetune.scratch import random_initialisation
from macs_audit.models import architectures  # noqa: F401
from macs_audit.models.export import save_safetensors, write_sidecar

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SIZE = 16


def trained_looking(seed=5):
    torch.manual_seed(seed)
    model = timm.create_model("macs_resnet9_c10", num_classes=10)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # far from any initialisation
    return model


def test_random_initialisation_is_the_architectures_seeded_init():
    model = trained_looking()
    random_initialisation(model, "macs_resnet9_c10", 10, seed=3)
    torch.manual_seed(3)
    reference = timm.create_model("macs_resnet9_c10", num_classes=10)
    for (name, a), (_, b) in zip(model.state_dict().items(), reference.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    other = trained_looking()
    random_initialisation(other, "macs_resnet9_c10", 10, seed=4)
    assert not torch.equal(other.state_dict()["fc.weight"], model.state_dict()["fc.weight"])


def test_random_initialisation_is_drawn_with_the_models_model_args():
    """A timm folder's model_args that change the initialisation but not the keys (zero_init_last: the last
    batch norm of each block starts at 0 or at 1) are the ones the fresh weights are drawn with."""
    model = timm.create_model("resnet10t", num_classes=10, zero_init_last=False)
    random_initialisation(model, "resnet10t", 10, seed=3, model_args={"zero_init_last": False})
    torch.manual_seed(3)
    reference = timm.create_model("resnet10t", num_classes=10, zero_init_last=False)
    for (name, a), (_, b) in zip(model.state_dict().items(), reference.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert float(model.state_dict()["layer1.0.bn2.weight"].abs().sum()) > 0  # not timm's default zeros


@pytest.mark.parametrize(
    "arch, message", [(None, "--arch"), ("macs_resnet9_wide_c10", "does not have"), ("no_such_arch_x", "cannot build")]
)
def test_random_initialisation_refuses_what_it_cannot_draw(arch, message):
    with pytest.raises(UsageError, match=message):
        random_initialisation(trained_looking(), arch, 10, seed=0)


def test_from_scratch_takes_the_sample_models_schedule_except_given_flags():
    options = FinetuneOptions().with_from_scratch(keep=frozenset({"lr"}))
    assert options.from_scratch and options.lr == FinetuneOptions().lr
    assert options.epochs == 16 and options.batch_size == 256 and options.warmup == FROM_SCRATCH["warmup"]
    # train_sample.py's 2 warm-up epochs of 16: the loop's warm-up steps are round(warmup * total).
    assert round(options.warmup * 16 * 175) == 2 * 175


def test_finetune_cli_from_scratch_trains_a_fresh_model(tmp_path):
    torch.manual_seed(5)
    start = timm.create_model("macs_resnet9_c10", num_classes=10)  # another draw: finite logits for its audit
    save_safetensors(start, tmp_path / "start.safetensors")
    write_sidecar(tmp_path / "start.json", {"arch": "macs_resnet9_c10", "num_classes": 10, "input_size": [SIZE, SIZE]})
    for name, seed, n in (("train", 0, 200), ("test", 1, 60)):
        x, y = tiny_images(n, seed=seed, size=SIZE)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    out = tmp_path / "out"
    args = ["finetune", str(tmp_path / "start.safetensors"), "--data", str(tmp_path / "train.npz")]
    args += ["--eval-data", str(tmp_path / "test.npz"), "--out", str(out), "--from-scratch", "--objective", "ce"]
    args += ["--epochs", "1", "--batch-size", "32", "--device", "cpu", "--bootstrap", "0", "--quiet"]
    args += ["--perturbations", "none", "--corruptions", "none"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    config = json.loads((out / "finetune_config.json").read_text())["options"]
    assert config["from_scratch"] and config["epochs"] == 1 and config["lr"] == FROM_SCRATCH["lr"]
    assert "ce training from scratch of start.safetensors" in result.output
    from safetensors.torch import load_file

    trained = load_file(out / "model.safetensors")
    # Trained from the init of --seed 0, not from the start model's weights (another draw).
    torch.manual_seed(0)
    init = timm.create_model("macs_resnet9_c10", num_classes=10).state_dict()
    key = "features.0.0.weight"
    assert (trained[key] - init[key]).abs().mean() < 0.5 * (trained[key] - start.state_dict()[key]).abs().mean()
