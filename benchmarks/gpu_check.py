"""The Python half of benchmarks/gpu_check.sh: each sub-command is one step, run under `timeout`.
The GPU tests are not here: the script runs them with pytest (`pytest -m gpu`).

    python3 benchmarks/gpu_check.py info      RESULTS
    python3 benchmarks/gpu_check.py prepare   RESULTS WORKDIR
    python3 benchmarks/gpu_check.py throughput RESULTS WORKDIR
    python3 benchmarks/gpu_check.py corruptions RESULTS
    python3 benchmarks/gpu_check.py train     RESULTS
    python3 benchmarks/gpu_check.py table     RESULTS

Every step appends rows {"row", "value", "note"} to RESULTS (JSON lines); `table` prints them.
Needs only what a bare GPU box has: python3 with torch, timm, onnxruntime (a CPU build is fine:
reported as such), typer, rich, scikit-learn. onnx/onnxscript are used when present.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE = ROOT / "sample_models" / "resnet9_c10_ce"
ORT_CPU_BUILD = "CPU build, CUDA provider unavailable"


def emit(results: Path, row: str, value: str, note: str = "") -> None:
    with open(results, "a") as fh:
        fh.write(json.dumps({"row": row, "value": value, "note": note}) + "\n")
    print(f"{row}: {value}" + (f"  ({note})" if note else ""), flush=True)


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def ort_cuda_status() -> tuple[bool, str]:
    """(usable, description) of onnxruntime's CUDA provider on this machine."""
    try:
        import onnxruntime as ort
    except ImportError:
        return False, "onnxruntime not installed"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False, f"onnxruntime {ort.__version__}: {ORT_CPU_BUILD}"
    if not cuda():
        return False, f"onnxruntime {ort.__version__}: CUDA provider built in, but no GPU"
    return True, f"onnxruntime {ort.__version__}: CUDAExecutionProvider available"


# ---------------------------------------------------------------------------------------------
def step_info(results: Path) -> None:
    import platform

    import torch

    emit(
        results,
        "python / torch",
        f"{platform.python_version()} / {torch.__version__}",
        f"CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}",
    )
    if cuda():
        props = torch.cuda.get_device_properties(0)
        emit(
            results,
            "GPU",
            f"{props.name}",
            f"{props.total_memory / 2**30:.0f} GiB, sm_{props.major}{props.minor}, "
            f"{torch.cuda.device_count()} device(s), bf16 {'yes' if torch.cuda.is_bf16_supported() else 'no'}",
        )
    else:
        emit(results, "GPU", "none", "torch.cuda.is_available() is False: GPU rows are skipped")
    emit(results, "onnxruntime CUDA", ort_cuda_status()[1])


def step_prepare(results: Path, work: Path) -> None:
    """work/model.safetensors + model.json (torch) and work/model.onnx (when it can be had)."""
    work.mkdir(parents=True, exist_ok=True)
    if SAMPLE.with_suffix(".safetensors").is_file() and SAMPLE.with_suffix(".json").is_file():
        shutil.copy(SAMPLE.with_suffix(".safetensors"), work / "model.safetensors")
        shutil.copy(SAMPLE.with_suffix(".json"), work / "model.json")
        origin = "sample model"
        model = None
    else:
        import timm
        import torch

        from macs_audit.models import architectures  # noqa: F401
        from macs_audit.models.export import save_safetensors, write_sidecar

        torch.manual_seed(0)
        model = timm.create_model("macs_resnet9_c10", num_classes=10).eval()
        save_safetensors(model, work / "model.safetensors")
        write_sidecar(
            work / "model.json",
            {
                "arch": "macs_resnet9_c10",
                "num_classes": 10,
                "input_size": [32, 32],
                "output": "logits",
                "mean": [0.4914, 0.4822, 0.4465],
                "std": [0.247, 0.2435, 0.2616],
            },
        )
        origin = "random-init macs_resnet9_c10 (no sample model in the tree)"
    emit(results, "model", "macs_resnet9_c10", origin)
    if SAMPLE.with_suffix(".onnx").is_file():
        shutil.copy(SAMPLE.with_suffix(".onnx"), work / "model.onnx")
        emit(results, "onnx model", "sample model")
        return
    try:
        if model is None:
            from macs_audit.models.torch import build_timm_model, read_state_dict

            model = build_timm_model("macs_resnet9_c10", 10, read_state_dict(work / "model.safetensors")).eval()
        from macs_audit.models.export import export_onnx

        meta = json.loads((work / "model.json").read_text())
        export_onnx(
            model,
            work / "model.onnx",
            {k: meta[k] for k in ("arch", "num_classes", "input_size", "mean", "std", "output")},
        )
        emit(results, "onnx model", "exported here")
    except Exception as exc:  # onnx / onnxscript missing on a bare box: ONNX rows are skipped
        emit(results, "onnx model", "unavailable", f"export failed: {type(exc).__name__}: {str(exc)[:80]}")


# ---------------------------------------------------------------------------------------------
def _time(fn, *args, repeat: int = 1) -> float:
    """Best wall time of fn(*args) over `repeat` calls, the device synchronised around each."""
    best = float("inf")
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        fn(*args)
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def _forward_all(predictor, x, batch: int) -> None:
    """The model alone over device-resident images: no host copies, no metrics."""
    import torch

    with torch.no_grad():
        for i in range(0, len(x), batch):
            predictor.forward(x[i : i + batch])


def _corrupt_all(corrupt, images, name: str, batch: int) -> None:
    for i in range(0, len(images), batch):
        corrupt(images[i : i + batch], name, 3, seed=i)


def _train_steps(steps: int, optimizer, forward_backward) -> None:
    """`steps` optimizer steps, each on the gradients of one `forward_backward()` (a bound training_step)."""
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        forward_backward()
        optimizer.step()


def step_throughput(results: Path, work: Path) -> None:
    """Steady-state images/s of the audit's clean and robust views (evaluate_view: data, view, model, metrics)."""
    import numpy as np
    import torch

    from macs_audit.auditing import Loop, evaluate_view
    from macs_audit.data.sources import load_source
    from macs_audit.models.predictor import load_predictor
    from macs_audit.pixels import to_unit_float
    from macs_audit.views.view import perturbation, view_device

    full = load_source(None)
    rows = [("torch", "cuda", 10000, 1000)] if cuda() else []
    ort_ok, ort_note = ort_cuda_status()
    if (work / "model.onnx").is_file():
        if ort_ok:
            rows.append(("onnx", "cuda", 10000, 1000))
        else:
            emit(results, "throughput onnxruntime cuda", "skipped", ort_note)
        rows.append(("onnx", "cpu", 2000, 500))
    rows.append(("torch", "cpu", 2000, 500))
    for backend, device, n, batch in rows:
        model = work / ("model.safetensors" if backend == "torch" else "model.onnx")
        label = f"{'torch' if backend == 'torch' else 'onnxruntime'} {device}"
        try:
            predictor = load_predictor(model, device=device)
            source = full.subset(np.arange(n))
            evaluate_view(predictor, full.subset(np.arange(batch)), 10, Loop(batch))  # warm-up: kernels, allocator
            t = _time(evaluate_view, predictor, source, 10, Loop(batch))
            view = perturbation("noise+blur", 0, view_device(predictor.device))
            tr = _time(functools.partial(evaluate_view, view=view), predictor, source, 10, Loop(batch))
            emit(
                results,
                f"evaluate {label}: clean view",
                f"{n / t:,.0f} img/s",
                f"{n} images, batch {batch}, provider {predictor.info['provider']}",
            )
            emit(
                results,
                f"evaluate {label}: noise+blur view",
                f"{n / tr:,.0f} img/s",
                "view on " + view_device(predictor.device),
            )
            if backend == "torch" and device == "cuda":
                # The model alone on a device-resident, normalised split: the ceiling the pipeline could reach.
                x = torch.from_numpy(to_unit_float(source.images(np.arange(n)))).to(predictor.device)
                _forward_all(predictor, x, batch)
                tm = _time(_forward_all, predictor, x, batch, repeat=3)
                emit(
                    results,
                    f"evaluate {label}: model only (bf16, data on GPU)",
                    f"{n / tm:,.0f} img/s",
                    "no host copies, no metrics",
                )
        except Exception as exc:
            emit(results, f"evaluate {label}", "FAILED", f"{type(exc).__name__}: {str(exc)[:100]}")
            traceback.print_exc()


def step_corruptions(results: Path) -> None:
    """Each of the 19 corruptions at severity 3: images/s on the GPU (5000 images) and on the CPU
    (500); then, on the GPU, the full 19 x 5 grid for the 10,000 built-in test images."""
    import numpy as np
    import torch

    from macs_audit.data.sources import load_source
    from macs_audit.views.corruptions.apply import batch_seed, corrupt
    from macs_audit.views.corruptions.table import CORRUPTIONS

    source = load_source(None)
    plans = ([("cuda", 5000, 1000)] if cuda() else []) + [("cpu", 500, 500)]
    for device, n, batch in plans:
        images = torch.from_numpy(source.images(np.arange(n))).to(device)
        per = {}
        for name in CORRUPTIONS:
            corrupt(images[:16], name, 3, seed=0)  # warm-up
            per[name] = _time(_corrupt_all, corrupt, images, name, batch)
        total = sum(per.values())
        slow = sorted(per, key=per.get, reverse=True)[:3]
        emit(
            results,
            f"corruptions {device}: 19 at severity 3",
            f"{19 * n / total:,.0f} img/s",
            f"{n} images each, batch {batch}, {total:.1f} s; slowest "
            + ", ".join(f"{s} {n / per[s]:,.0f}/s" for s in slow),
        )
        if device == "cuda":
            for name in CORRUPTIONS:
                emit(results, f"  {name} cuda, severity 3", f"{n / per[name]:,.0f} img/s", "")
    if cuda():
        n, batch = 10000, 2500
        images = torch.from_numpy(source.images(np.arange(n))).to("cuda")
        checksum = torch.zeros((), dtype=torch.int64, device="cuda")
        for name in CORRUPTIONS:  # warm-up at every severity (tables, kernels)
            for severity in range(1, 6):
                corrupt(images[:16], name, severity, seed=0)

        def grid():
            for name in CORRUPTIONS:
                for severity in range(1, 6):
                    for i in range(0, n, batch):
                        out = corrupt(images[i : i + batch], name, severity, batch_seed(0, name, severity, i))
                        checksum.add_(out[:, 0, 0, 0].sum())  # keeps every batch live, costs nothing

        t = _time(grid)
        emit(
            results,
            "corruption grid cuda: 19 x 5 x 10,000 images",
            f"{t:.1f} s",
            f"{19 * 5 * n / t:,.0f} img/s, batch {batch}, generated and kept on the GPU (CPU target: < 600 s)",
        )


def step_cifar_c(results: Path, work: Path) -> None:
    """The README's sample-model CIFAR-10-C audit (19 x 5 x 10,000 generated images) on the GPU."""
    import json

    model = ROOT / "sample_models" / "resnet9_c10_ce.safetensors"
    report = work / "cifar_c.json"
    start = time.perf_counter()
    subprocess.check_call(
        [
            sys.executable,
            "-m",
            "macs_audit",
            "evaluate",
            str(model),
            "--device",
            "cuda",
            "--corruptions",
            "cifar-c",
            "--quiet",
            "-o",
            str(report),
        ],
        cwd=ROOT,
    )
    wall = time.perf_counter() - start
    r = json.loads(report.read_text())
    summary = r["corruption_summary"]
    emit(
        results,
        "evaluate sample model, CIFAR-10-C 19 x 5 (cuda, end to end)",
        f"{wall:.1f} s",
        f"clean acc {r['clean']['metrics']['accuracy']:.4f}; mean acc 15x5 {summary['mean_accuracy_15']:.4f}, "
        f"19x5 {summary['mean_accuracy_19']:.4f}, ECE 19x5 {summary['mean_ece_19']:.4f} "
        "(CPU run in the README: 0.6937 / 0.7029 / 0.1306)",
    )


def step_imagenet_grid(results: Path, work: Path, images: int = 10_000, device: str = "cuda") -> None:
    """Issue target: the ImageNet-C grid (19 x 5) of `images` 224 px images, generated on the device and scored
    by a ResNet-50-sized model (timm resnet50, random init, 10 classes), end to end through the CLI."""
    import numpy as np
    import timm
    import torch

    from macs_audit.models.export import save_safetensors, write_sidecar

    torch.manual_seed(0)
    save_safetensors(timm.create_model("resnet50", pretrained=False, num_classes=10), work / "r50.safetensors")
    imagenet = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    write_sidecar(work / "r50.json", {"arch": "resnet50", "num_classes": 10, "input_size": [224, 224], **imagenet})
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (images, 224, 224, 3), dtype=np.uint8)  # the work does not depend on the content
    np.savez(work / "d224.npz", x=x, y=np.arange(images) % 10)
    report = work / "imagenet_grid.json"
    args = ["evaluate", str(work / "r50.safetensors"), "--data", str(work / "d224.npz"), "--device", device]
    args += ["--corruptions", "cifar-c", "--corruption-set", "imagenet", "--perturbations", "none"]
    args += ["--sensitivity-samples", "0", "--bootstrap", "0", "--calibration-split", "0", "--calibrators", "none"]
    start = time.perf_counter()
    subprocess.check_call([sys.executable, "-m", "macs_audit", *args, "--quiet", "-o", str(report)], cwd=ROOT)
    wall = time.perf_counter() - start
    summary = json.loads(report.read_text())["corruption_summary"]
    emit(
        results,
        f"ImageNet-C grid 19 x 5 x {images:,} at 224 px, resnet50 ({device}, end to end)",
        f"{wall:.1f} s",
        f"set {summary['corruption_set']}; {19 * 5 * images / wall:,.0f} corrupted images/s (target: under 300 s)",
    )


def step_train(results: Path) -> None:
    """MaCS training steps (clean + perturbed forward, backward, SGD step) per second."""
    import numpy as np
    import timm
    import torch

    from macs_audit.data.sources import load_source
    from macs_audit.finetune.loop import Preprocess, make_optimizer, training_step
    from macs_audit.finetune.options import FinetuneOptions
    from macs_audit.models import architectures  # noqa: F401

    source = load_source(None)
    plans = ([("cuda", 512, True, 40), ("cuda", 512, False, 40)] if cuda() else []) + [("cpu", 128, False, 3)]
    for device_name, batch, amp, steps in plans:
        device = torch.device(device_name)
        torch.manual_seed(0)
        model = timm.create_model("macs_resnet9_c10", num_classes=10).to(device)
        if device.type == "cuda":
            model = model.to(memory_format=torch.channels_last)
        model.train()
        options = FinetuneOptions(device=device_name, batch_size=batch, amp=amp)
        optimizer, prep = make_optimizer(model, options), Preprocess(options, device)
        data_gen, view_gen = torch.Generator().manual_seed(0), torch.Generator(device=device).manual_seed(0)
        x = torch.from_numpy(source.images(np.arange(batch))).to(device).permute(0, 3, 1, 2).float().div_(255)
        y = torch.from_numpy(source.labels[:batch]).to(device)

        forward_backward = functools.partial(training_step, model, x, y, options, prep, data_gen, view_gen, amp)
        _train_steps(3 if device.type == "cuda" else 1, optimizer, forward_backward)
        t = _time(_train_steps, steps, optimizer, forward_backward)
        emit(
            results,
            f"MaCS train step {device_name} {'bf16 autocast' if amp else 'fp32'}",
            f"{steps / t:,.1f} steps/s",
            f"batch {batch} ({batch * steps / t:,.0f} img/s; 2 forward passes per image)",
        )


def step_table(results: Path) -> None:
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()] if results.is_file() else []
    w1 = max([len(r["row"]) for r in rows] + [4])
    w2 = max([len(r["value"]) for r in rows] + [5])
    print(f"\n{'check':<{w1}}  {'result':<{w2}}  note")
    print(f"{'-' * w1}  {'-' * w2}  {'-' * 4}")
    for r in rows:
        print(f"{r['row']:<{w1}}  {r['value']:<{w2}}  {r['note']}")


def main() -> int:
    cmd, results = sys.argv[1], Path(sys.argv[2])
    work = Path(sys.argv[3]) if len(sys.argv) > 3 else None
    steps = {
        "info": lambda: step_info(results),
        "prepare": lambda: step_prepare(results, work),
        "throughput": lambda: step_throughput(results, work),
        "corruptions": lambda: step_corruptions(results),
        "train": lambda: step_train(results),
        "cifar_c": lambda: step_cifar_c(results, work),
        "imagenet_grid": lambda: step_imagenet_grid(results, work),
        "table": lambda: step_table(results),
    }
    return int(steps[cmd]() or 0)


if __name__ == "__main__":
    sys.exit(main())
