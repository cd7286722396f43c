"""DDP fine-tuning with torchrun (gloo, 2 CPU processes): a run, a killed run resumed, and the CLI."""

import json
import textwrap

import numpy as np
import pytest
import torch
from conftest import tiny_images
from torchrun import torchrun

# Run under torchrun: a 2-epoch DDP fine-tune; a second run killed in epoch 2 and resumed.
SCRIPT = textwrap.dedent("""
    import sys, torch
    from macs_audit import distributed
    from macs_audit.data.sources import array_source
    from macs_audit.finetune.options import FinetuneOptions
    from macs_audit.finetune.loop import finetune, load_checkpoint
    from conftest import tiny_images

    out = sys.argv[1]
    ctx = distributed.init_from_env("cpu")
    x, y = tiny_images(96, seed=2)
    source = array_source("tiny", "npz", x, y, [str(i) for i in range(10)])

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10))

    options = FinetuneOptions(objective="macs", epochs=2, batch_size=16, lr=0.05, val_fraction=0.25, device="cpu",
                              input_size=(32, 32), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25)).validate()
    full = finetune(model(), source, options, checkpoint=f"{out}/full.pt", ctx=ctx)

    class Killed(Exception):
        pass

    def kill(description, done, total, terms=None):
        if str(description).startswith("epoch 2") and done == 1:
            raise Killed

    try:
        finetune(model(), source, options, progress=kill, checkpoint=f"{out}/killed.pt", ctx=ctx)
    except Killed:
        pass
    distributed.barrier(ctx)
    assert load_checkpoint(f"{out}/killed.pt")["epoch"] == 1
    resumed = finetune(model(), source, options, checkpoint=f"{out}/killed.pt", resume=True, ctx=ctx)
    a, b = full.model.state_dict(), resumed.model.state_dict()
    same = all(torch.equal(a[k], b[k]) for k in a)
    if ctx.is_main:
        torch.save({"full": a, "same": same, "steps": (full.steps, resumed.steps),
                    "resumed_from": resumed.resumed_from_epoch}, f"{out}/result.pt")
    distributed.shutdown(ctx)
""")


@pytest.mark.slow
def test_ddp_finetune_runs_and_resumes_bit_identically(tmp_path):
    (tmp_path / "ddp_script.py").write_text(SCRIPT)
    run = torchrun([str(tmp_path / "ddp_script.py"), str(tmp_path)], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    result = torch.load(tmp_path / "result.pt", weights_only=True)
    assert result["same"] and result["resumed_from"] == 1
    assert result["steps"][0] == result["steps"][1] == 2 * (72 // 16)  # 96 images, 25% held out for validation


@pytest.mark.slow
def test_ddp_finetune_through_the_cli(tmp_path):
    import timm

    from macs_audit.models import architectures  # noqa: F401
    from macs_audit.models.export import save_safetensors

    model = timm.create_model("macs_resnet9_c10", num_classes=10)
    save_safetensors(model, tmp_path / "start.safetensors")
    (tmp_path / "start.json").write_text(json.dumps({"arch": "macs_resnet9_c10", "num_classes": 10}))
    x, y = tiny_images(64, seed=3)
    np.savez(tmp_path / "train.npz", x=x, y=y)
    np.savez(tmp_path / "eval.npz", x=x[:32], y=y[:32])
    run = torchrun(
        [
            "-m",
            "macs_audit",
            "finetune",
            str(tmp_path / "start.safetensors"),
            "--data",
            str(tmp_path / "train.npz"),
            "--eval-data",
            str(tmp_path / "eval.npz"),
            "--out",
            str(tmp_path / "out"),
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--device",
            "cpu",
            "--bootstrap",
            "0",
            "--sensitivity-samples",
            "0",
            "--quiet",
        ],
        tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "out"
    after = json.loads((out / "audit_after.json").read_text())
    assert after["runtime"]["world_size"] == 2 and after["data"]["n"] == 32
    config = json.loads((out / "finetune_config.json").read_text())
    assert config["steps"] == config["split"]["n_train"] // 16  # one epoch of global batches of 16
    assert (out / "model.safetensors").exists() and (out / "model.onnx").exists()
    assert json.loads((out / "audit_before.json").read_text())["runtime"]["world_size"] == 2
