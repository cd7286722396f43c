"""Training step time of MaCS against cross-entropy, same model, same batch, one run.

MaCS does a forward and backward pass over the clean and over the perturbed view, plus the
perturbation itself, so about 2x a CE step is the floor; the paper measures 2.04x for ResNet-50
(Table 9). Target here: at most 2.1x.

Steps are timed interleaved (CE, MaCS, CE, MaCS, ...) so that load from other processes on a
shared machine hits both objectives alike; the ratio is of the medians. Each step is the loop's
own code: augmentation, `training_step` (perturbation, forward, loss, backward), optimizer step.

    python benchmarks/bench_finetune.py [--arch macs_resnet9_c10] [--batch-size 128] [--steps 30] [--threads 2]
"""

import argparse
import json
import platform
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="macs_resnet9_c10")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per objective")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    import timm

    from macs_audit.finetune.loop import (
        Preprocess,
        augment,
        make_optimizer,
        training_step,
    )
    from macs_audit.finetune.options import FinetuneOptions
    from macs_audit.models import architectures  # noqa: F401

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(args.batch_size, 3, args.size, args.size, generator=gen).to(device)
    labels = torch.randint(0, 10, (args.batch_size,), generator=gen).to(device)
    setups = {}
    for objective in ("ce", "macs"):
        torch.manual_seed(0)
        options = FinetuneOptions(objective=objective, input_size=(args.size, args.size), device=args.device)
        model = timm.create_model(args.arch, num_classes=10).to(device).train()
        setups[objective] = (
            model,
            make_optimizer(model, options),
            options,
            Preprocess(options, device),
            torch.Generator().manual_seed(1),
            torch.Generator(device=device).manual_seed(2),
        )

    def step(objective: str) -> float:
        model, optimizer, options, prep, data_gen, view_gen = setups[objective]
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        x = augment(images, data_gen)
        optimizer.zero_grad(set_to_none=True)
        loss, _ = training_step(model, x, labels, options, prep, data_gen, view_gen)
        loss.item()  # the loop reads the loss every step (NaN check, progress)
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    times = {"ce": [], "macs": []}
    for i in range(args.warmup + args.steps):
        for objective in ("ce", "macs"):
            t = step(objective)
            if i >= args.warmup:
                times[objective].append(t)
    ce, macs = statistics.median(times["ce"]), statistics.median(times["macs"])
    params = sum(p.numel() for p in setups["ce"][0].parameters())
    result = {
        "arch": args.arch,
        "params": params,
        "batch_size": args.batch_size,
        "image_size": args.size,
        "device": args.device,
        "threads": args.threads,
        "steps": args.steps,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "ce_step_ms_median": round(1000 * ce, 1),
        "macs_step_ms_median": round(1000 * macs, 1),
        "ce_img_per_s": round(args.batch_size / ce),
        "macs_img_per_s": round(args.batch_size / macs),
        "macs_over_ce": round(macs / ce, 3),
        "ce_step_ms_iqr": [round(1000 * q, 1) for q in statistics.quantiles(times["ce"], n=4)[::2]],
        "macs_step_ms_iqr": [round(1000 * q, 1) for q in statistics.quantiles(times["macs"], n=4)[::2]],
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
