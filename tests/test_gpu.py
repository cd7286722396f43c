"""GPU paths: the torch backend on CUDA (bf16 autocast, float32 logits), views and corruptions on
CUDA, autograd sensitivity on CUDA, onnxruntime's CUDA provider, sharded evaluate on two GPUs.

Every CUDA test is marked `gpu` and skips cleanly without a GPU; `benchmarks/gpu_check.sh` runs the
tests marked `gpu` (`pytest -m gpu`) on a GPU machine.
The device-resolution tests at the top run everywhere (they pretend the GPU is absent or present).
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import linear_onnx, tiny_images
from torchrun import evaluate_alone_and_sharded

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_models" / "resnet9_c10_ce"
CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.gpu


# ---------------------------------------------------------------------------------------------
# Device resolution (CPU): --device cuda without a GPU is a usage error, exit 2
# ---------------------------------------------------------------------------------------------
def _gpu(monkeypatch, present: bool):
    from macs_audit import devices

    monkeypatch.setattr(devices, "cuda_available", lambda: present)


def test_cli_device_cuda_without_gpu_exits_2(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from macs_audit.cli import app

    _gpu(monkeypatch, False)
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")  # the device is checked before the model file is read
    for device in ("cuda", "cuda:1"):
        result = CliRunner().invoke(app, ["evaluate", str(model), "--device", device, "--bootstrap", "0", "--quiet"])
        assert result.exit_code == 2, result.output
        assert "no CUDA GPU" in result.output and "Traceback" not in result.output


def test_rank_device_under_torchrun(monkeypatch):
    """Each torchrun rank drives its own GPU; without one, 'auto' falls back to the CPU."""
    from macs_audit import distributed
    from macs_audit.distributed import SINGLE, Context, rank_device

    ctx = Context(rank=3, world_size=4, local_rank=1)
    monkeypatch.setattr(distributed, "cuda_available", lambda: True)
    assert rank_device(ctx, "auto") == "cuda:1" and rank_device(ctx, "cuda") == "cuda:1"
    assert rank_device(ctx, "cpu") == "cpu" and rank_device(ctx, "cuda:0") == "cuda:0"
    assert rank_device(SINGLE, "auto") == "auto"  # one process: resolve_device decides
    monkeypatch.setattr(distributed, "cuda_available", lambda: False)
    assert rank_device(ctx, "auto") == "cpu" and rank_device(ctx, "cuda") == "cuda"  # the latter then exits 2


def test_onnx_cuda_provider_requested_only_for_cuda(monkeypatch):
    """The CUDA provider (after preloading the CUDA/cuDNN libraries) for cuda:N, never for the CPU."""
    ort = pytest.importorskip("onnxruntime")
    from macs_audit.models.onnx import providers_for

    calls = []
    monkeypatch.setattr(ort, "preload_dlls", lambda *a, **k: calls.append(1), raising=False)
    assert providers_for("cpu") == ["CPUExecutionProvider"] and calls == []
    assert providers_for("cuda:1") == [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"]
    assert calls == [1]


# ---------------------------------------------------------------------------------------------
# Helpers for the CUDA tests
# ---------------------------------------------------------------------------------------------
def torch_model_file(tmp_path) -> Path:
    """The committed sample model if present, else a small ResNet-9 with spread-out logits."""
    if SAMPLE.with_suffix(".safetensors").is_file() and SAMPLE.with_suffix(".json").is_file():
        return SAMPLE.with_suffix(".safetensors")
    import timm

    from macs_audit.models import architectures  # noqa: F401
    from macs_audit.models.export import save_safetensors, write_sidecar

    torch.manual_seed(0)
    model = timm.create_model("macs_resnet9_c10", num_classes=10).eval()
    with torch.no_grad():
        model.fc.weight.mul_(40)  # random-init logits are tiny; make NLL and margins non-trivial
    path = tmp_path / "m.safetensors"
    save_safetensors(model, path)
    write_sidecar(
        tmp_path / "m.json",
        {
            "arch": "macs_resnet9_c10",
            "num_classes": 10,
            "input_size": [32, 32],
            "output": "logits",
            "mean": [0.49, 0.48, 0.45],
            "std": [0.25, 0.24, 0.26],
        },
    )
    return path


def cifar_subset(n: int):
    from macs_audit.data.sources import load_source
    from macs_audit.data.splits import stratified_subset

    source = load_source(None)
    return source.subset(stratified_subset(source.labels, n, seed=0))


def unit_float(images_uint8: np.ndarray) -> np.ndarray:
    from macs_audit.pixels import to_unit_float

    return to_unit_float(images_uint8)


# ---------------------------------------------------------------------------------------------
# Torch backend on CUDA
# ---------------------------------------------------------------------------------------------
@needs_cuda
def test_torch_predictor_cuda_matches_cpu(tmp_path):
    from macs_audit.metrics.accumulators import calibration_metrics
    from macs_audit.models.predictor import load_predictor

    path = torch_model_file(tmp_path)
    source = cifar_subset(1000)
    x, y = unit_float(source.images(np.arange(len(source)))), source.labels
    assert not load_predictor(path, device="cuda").autocast  # audits run in fp32 unless --precision says so
    cpu, gpu = load_predictor(path, device="cpu"), load_predictor(path, device="cuda", precision="bf16")
    assert gpu.info["device"] == "cuda:0" and "CUDA" in gpu.info["provider"] and gpu.autocast
    assert gpu.info["precision"] == "bf16"
    seen = []
    hook = gpu.model.register_forward_hook(lambda m, i, o: seen.append(o.dtype))  # the model's own output
    logits_gpu = np.concatenate([gpu.predict(x[i : i + 250]) for i in range(0, len(x), 250)])
    hook.remove()
    logits_cpu = np.concatenate([cpu.predict(x[i : i + 250]) for i in range(0, len(x), 250)])
    assert set(seen) == {getattr(gpu, "amp_dtype", torch.bfloat16)}, seen  # autocast really ran (bf16) ...
    assert logits_gpu.dtype == np.float32 and logits_gpu.shape == logits_cpu.shape  # ... and was upcast
    a, b = calibration_metrics(logits_cpu, y, 10), calibration_metrics(logits_gpu, y, 10)
    assert abs(a["nll"] - b["nll"]) <= 1e-2 * max(1.0, a["nll"]), (a["nll"], b["nll"])
    assert abs(a["accuracy"] - b["accuracy"]) <= 0.01, (a["accuracy"], b["accuracy"])
    assert abs(a["ece"] - b["ece"]) <= 0.01 and abs(a["brier"] - b["brier"]) <= 0.01
    agree = (logits_cpu.argmax(1) == logits_gpu.argmax(1)).mean()
    assert agree >= 0.98, agree


@needs_cuda
def test_cli_evaluate_on_cuda_matches_cpu(tmp_path):
    """The whole audit (clean + robust view + a corruption + sensitivity) on the GPU, against the CPU."""
    from typer.testing import CliRunner

    from macs_audit.cli import app

    path = torch_model_file(tmp_path)
    reports = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / f"{device}.json"
        result = CliRunner().invoke(
            app,
            [
                "evaluate",
                str(path),
                "--device",
                device,
                "--limit",
                "1000",
                "--corruptions",
                "gaussian_noise,contrast",
                "--severities",
                "3",
                "--sensitivity-samples",
                "100",
                "--bootstrap",
                "0",
                "--quiet",
                "-o",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        reports[device] = json.loads(out.read_text())
    cpu, gpu = reports["cpu"], reports["cuda"]
    assert gpu["runtime"]["device"] == "cuda:0" and cpu["runtime"]["device"] == "cpu"
    assert [v["name"] for v in gpu["views"]] == [v["name"] for v in cpu["views"]]
    assert abs(gpu["clean"]["metrics"]["nll"] - cpu["clean"]["metrics"]["nll"]) <= 1e-2 * max(
        1, cpu["clean"]["metrics"]["nll"]
    )
    for vc, vg in zip(cpu["views"], gpu["views"], strict=True):
        # Random views draw from CUDA's generator on the GPU: other noise, same distribution.
        assert abs(vc["metrics"]["accuracy"] - vg["metrics"]["accuracy"]) <= 0.05, vc["name"]
    lc, lg = cpu["robustness"]["sensitivity"]["lipschitz"], gpu["robustness"]["sensitivity"]["lipschitz"]
    assert abs(lc - lg) <= 0.05 * lc, (lc, lg)


@needs_cuda
def test_sensitivity_autograd_on_cuda_in_float32(tmp_path):
    """Input gradients on the GPU run in float32 (autocast off) and agree with the CPU."""
    from macs_audit.metrics.sensitivity import sensitivity
    from macs_audit.models.predictor import load_predictor

    path = torch_model_file(tmp_path)
    source = cifar_subset(128)
    x, y = unit_float(source.images(np.arange(len(source)))), source.labels
    cpu, gpu = load_predictor(path, device="cpu"), load_predictor(path, device="cuda")
    seen = []
    hook = gpu.model.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    got = sensitivity(gpu, x, y, batch_size=64)
    hook.remove()
    want = sensitivity(cpu, x, y, batch_size=64)
    assert got["method"] == "autograd" and got["n"] == 128
    assert set(seen) == {torch.float32}, f"sensitivity forward ran in {seen} on CUDA, not float32"
    # TF32 convolutions on recent GPUs leave ~1e-3 relative differences.
    assert abs(got["lipschitz"] - want["lipschitz"]) <= 1e-2 * want["lipschitz"], (got["lipschitz"], want["lipschitz"])
    assert abs(got["mean_margin_subset"] - want["mean_margin_subset"]) <= 1e-2 * max(1, abs(want["mean_margin_subset"]))


# ---------------------------------------------------------------------------------------------
# Perturbations and corruptions on CUDA
# ---------------------------------------------------------------------------------------------
@needs_cuda
def test_perturbation_views_on_cuda():
    from macs_audit.views import perturbation_params, perturbations
    from macs_audit.views.view import perturbation

    images, _ = tiny_images(40, seed=1)
    x_cpu = torch.from_numpy(unit_float(images))
    x = x_cpu.cuda()
    for name in perturbation_params.EVAL_VIEWS:
        gen = torch.Generator(device="cuda").manual_seed(7)
        out = perturbations.evaluation_view(name, x, gen)
        assert out.device == x.device and out.dtype == torch.float32 and out.shape == x.shape, name
        assert 0 <= float(out.min()) and float(out.max()) <= 1, name
        again = perturbations.evaluation_view(name, x, torch.Generator(device="cuda").manual_seed(7))
        assert torch.equal(out, again), f"{name} is not deterministic on CUDA"
        # Through the audit's view function (uint8 NHWC numpy in, float NCHW numpy out).
        view = perturbation(name, seed=0, device="cuda:0")
        a, b = view(images, 40), view(images, 40)
        assert a.dtype == np.float32 and a.shape == (40, 3, 32, 32) and np.array_equal(a, b), name
    # The deterministic blur matches the CPU; the noise has the right strength.
    blur = perturbations.gaussian_blur(x, perturbation_params.EVAL_BLUR_SIGMA).cpu()
    assert torch.allclose(blur, perturbations.gaussian_blur(x_cpu, perturbation_params.EVAL_BLUR_SIGMA), atol=1e-5)
    mid = torch.full((64, 3, 32, 32), 0.5, device="cuda")
    noise = (
        perturbations.gaussian_noise(
            mid, perturbation_params.EVAL_NOISE_SIGMA, torch.Generator(device="cuda").manual_seed(0)
        )
        - mid
    )
    assert abs(float(noise.std()) - perturbation_params.EVAL_NOISE_SIGMA) < 2e-3
    # The training view (per-sample strengths) too.
    t1 = perturbations.training_view(x, torch.Generator(device="cuda").manual_seed(3))
    t2 = perturbations.training_view(x, torch.Generator(device="cuda").manual_seed(3))
    assert t1.device == x.device and t1.dtype == torch.float32 and torch.equal(t1, t2)


CUDA_CORRUPTIONS = (
    "gaussian_noise",
    "impulse_noise",
    "glass_blur",
    "zoom_blur",
    "fog",
    "contrast",
    "elastic_transform",
    "jpeg_compression",
)


@needs_cuda
def test_tensor_jpeg_on_cuda_equals_cpu():
    from macs_audit.views.corruptions import apply as corruptions
    from macs_audit.views.corruptions import jpeg

    images, _ = tiny_images(64, seed=4)
    x = torch.from_numpy(images)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True  # must not change the exact integer passes
    try:
        for quality in (80, 40):
            assert torch.equal(jpeg.roundtrip(x.cuda(), quality).cpu(), jpeg.roundtrip(x, quality)), quality
        assert jpeg.roundtrip(x[:0].cuda(), 80).shape == (0, 32, 32, 3)
        # contrast: a reduction on the GPU, BLAS products on the CPU; they may differ only on
        # rare values whose exact result is an integer
        for severity in (1, 4):
            diff = (
                corruptions.corrupt(x.cuda(), "contrast", severity, 0).cpu().int()
                - corruptions.corrupt(x, "contrast", severity, 0).int()
            )
            assert diff.abs().max() <= 1 and (diff != 0).float().mean() < 1e-3, severity
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


@needs_cuda
def test_corruptions_on_cuda_deterministic():
    from macs_audit.views.corruptions import apply as corruptions
    from macs_audit.views.view import corruption

    images, _ = tiny_images(16, seed=2)
    x = torch.from_numpy(images).cuda()
    for name in CUDA_CORRUPTIONS:
        out = corruptions.corrupt(x, name, 3, seed=11)
        assert out.device == x.device and out.dtype == torch.uint8 and out.shape == x.shape, name
        assert torch.equal(out, corruptions.corrupt(x, name, 3, seed=11)), f"{name} is not deterministic on CUDA"
        assert not torch.equal(out, x), name
    for name in ("gaussian_noise", "impulse_noise", "glass_blur", "fog", "elastic_transform"):  # random
        assert not torch.equal(corruptions.corrupt(x, name, 3, seed=11), corruptions.corrupt(x, name, 3, seed=12)), name
    view = corruption("gaussian_noise", 3, seed=0, device="cuda:0", frost_textures=None)
    a, b = view(images, 0), view(images, 0)
    assert a.dtype == np.float32 and a.shape == (16, 3, 32, 32) and np.array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# Training on CUDA: bf16 autocast, losses and gradients in float32
# ---------------------------------------------------------------------------------------------
@needs_cuda
def test_macs_training_step_on_cuda_with_autocast():
    import timm

    from macs_audit.finetune.loop import Preprocess, training_step
    from macs_audit.finetune.options import FinetuneOptions
    from macs_audit.models import architectures  # noqa: F401

    torch.manual_seed(0)
    device = torch.device("cuda")
    model = timm.create_model("macs_resnet9_c10", num_classes=10).to(device, memory_format=torch.channels_last).train()
    options = FinetuneOptions(device="cuda", batch_size=64)
    images, labels = tiny_images(64, seed=5)
    x = torch.from_numpy(images).to(device).permute(0, 3, 1, 2).float().div_(255)
    y = torch.from_numpy(labels).to(device)
    seen = []
    hook = model.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    loss, terms = training_step(
        model,
        x,
        y,
        options,
        Preprocess(options, device),
        torch.Generator().manual_seed(0),
        torch.Generator(device=device).manual_seed(0),
        amp=True,
    )
    hook.remove()
    assert seen and set(seen) == {torch.bfloat16}
    assert loss.dtype == torch.float32 and torch.isfinite(loss) and set(terms) == {"ce", "margin", "kl"}
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)


# ---------------------------------------------------------------------------------------------
# onnxruntime's CUDA provider
# ---------------------------------------------------------------------------------------------
def _ort_cuda() -> bool:
    try:
        import onnxruntime as ort
    except ImportError:
        return False
    return "CUDAExecutionProvider" in ort.get_available_providers()


@needs_cuda
@pytest.mark.skipif(not _ort_cuda(), reason="onnxruntime without CUDAExecutionProvider (CPU build)")
def test_onnx_cuda_provider_used_and_matches_cpu(tmp_path):
    from macs_audit.models.predictor import load_predictor

    if SAMPLE.with_suffix(".onnx").is_file():
        path = SAMPLE.with_suffix(".onnx")
    else:
        pytest.importorskip("onnx")
        path = linear_onnx(tmp_path / "m.onnx")
    images, _ = tiny_images(64, seed=6)
    x = unit_float(images)
    gpu = load_predictor(path, device="cuda")
    assert gpu.info["provider"] == "CUDAExecutionProvider" and gpu.info["device"] == "cuda:0"
    got = gpu.predict(x)
    want = load_predictor(path, device="cpu").predict(x)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-2 * max(1.0, float(np.abs(want).max()))  # TF32 allowed


# ---------------------------------------------------------------------------------------------
# torchrun on two GPUs (NCCL): sharded evaluate equals one process
# ---------------------------------------------------------------------------------------------
@needs_cuda
@pytest.mark.slow
@pytest.mark.skipif(not CUDA or torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_sharded_evaluate_on_two_gpus(tmp_path):
    path = torch_model_file(tmp_path)
    args = [
        str(path),
        "--device",
        "cuda",
        "--limit",
        "1000",
        "--batch-size",
        "128",
        "--perturbations",
        "noise+blur",
        "--sensitivity-samples",
        "0",
        "--bootstrap",
        "0",
        "--quiet",
    ]
    a, b = evaluate_alone_and_sharded(args, tmp_path, CUDA_VISIBLE_DEVICES="0")
    assert b["runtime"]["world_size"] == 2 and b["data"]["n"] == a["data"]["n"] == 1000
    for key in ("accuracy", "nll", "ece", "brier"):
        assert abs(a["clean"]["metrics"][key] - b["clean"]["metrics"][key]) <= 1e-4, key
        assert abs(a["views"][0]["metrics"][key] - b["views"][0]["metrics"][key]) <= 1e-4, key
