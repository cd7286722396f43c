"""Train the sample model: a quarter-width CIFAR ResNet-9, plain cross-entropy, on CIFAR-10.

Reproduce (two phases: 16 epochs with crop/flip, then 6 epochs without augmentation or weight
decay, which makes the model overconfident as plain CE training does when run long):
    python sample_models/train_sample.py --data DATA/cifar10_train.npz --test DATA/cifar10_test.npz --out runs/phase1
    python sample_models/train_sample.py --data DATA/cifar10_train.npz --test DATA/cifar10_test.npz \
        --init runs/phase1/resnet9_c10_ce.safetensors --epochs 6 --lr 0.05 --warmup-epochs 0 \
        --weight-decay 0 --augment 0
--data and --test are npz files with arrays x (uint8, N x 32 x 32 x 3) and y (labels): the 50,000
training and the 10,000 test images of the CIFAR-10 python batches.
Writes sample_models/<name>.safetensors, .onnx and .json (the sidecar). Deterministic on CPU
for a given seed and thread count. The model never sees a class-stratified 10% of the training
data (5,000 images): the split `macs-audit finetune` holds out by default (--val-fraction 0.1,
--split-seed 0), so fine-tuning runs are selected on images the start model has not memorised.
It is trained plainly (no label smoothing, no mixup) so that it is overconfident: the patient
the `finetune` and `calibrate` commands fix. Timings on 2 CPU cores: 1,148 s + 358 s.

The schedule, the crop/flip and the weight-decay groups are fine-tuning's own (`lr_at`, `augment`,
`param_groups` of macs_audit.finetune.loop), drawn in the same order from one generator (the epoch's
permutation, then each batch's crops and flips). The committed weights were trained with a schedule
that divided (step - warmup) by (total - warmup) before multiplying by pi; `lr_at` multiplies first,
which changes the learning rate in its last bit at about a fifth of the steps. A rebuild therefore gives
a model of the same quality, not the committed bytes.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from macs_audit.data.splits import stratified_split
from macs_audit.finetune.loop import augment, lr_at, param_groups
from macs_audit.models import architectures  # noqa: F401  (registers the timm models)
from macs_audit.models.config import CIFAR10_MEAN, CIFAR10_STD
from macs_audit.models.export import export_onnx, save_safetensors, write_sidecar

# Hyperparameters in one place.
HP = dict(
    arch="macs_resnet9_c10",
    epochs=16,
    batch_size=256,
    lr=0.2,  # peak SGD learning rate (nesterov, momentum 0.9)
    warmup_epochs=2,  # linear warm-up, then cosine decay to 0
    weight_decay=5e-4,
    seed=0,
    augment=1,  # 1: crop + flip; 0: none (the over-training phase)
    init="",  # start from these safetensors weights (phase 2 continues phase 1)
    val_fraction=0.1,  # held out of --data, never trained on (finetune's default validation split)
    split_seed=0,
    classes="",  # the CIFAR-10 classes to train on, e.g. "0,1,2,3,8,9" (labels renumbered in that order); "": all ten
)
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="the CIFAR-10 training set as an npz (x, y)")
    parser.add_argument("--test", required=True, help="the CIFAR-10 test set as an npz (x, y)")
    parser.add_argument("--out", default="sample_models")
    parser.add_argument("--name", default="resnet9_c10_ce")
    for key, value in HP.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=type(value), default=value)
    args = parser.parse_args()

    import timm

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    kept = [int(c) for c in args.classes.split(",")] if args.classes else list(range(10))
    train = kept_classes(dict(np.load(args.data)), kept)
    held_out, train_idx = stratified_split(train["y"].astype(np.int64), args.val_fraction, args.split_seed)
    mean = torch.tensor(CIFAR10_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD).view(1, 3, 1, 1)
    x_train = torch.from_numpy(train["x"][train_idx]).permute(0, 3, 1, 2).float().div_(255)
    y_train = torch.from_numpy(train["y"][train_idx]).long()
    print(f"training on {len(train_idx)} images; {len(held_out)} held out", flush=True)

    model = timm.create_model(args.arch, pretrained=False, num_classes=len(kept))
    if args.init:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(args.init))
    opt = torch.optim.SGD(param_groups(model, args.weight_decay), lr=args.lr, momentum=0.9, nesterov=True)
    steps_per_epoch = len(x_train) // args.batch_size
    total = steps_per_epoch * args.epochs
    step = 0
    start = time.time()
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(x_train), generator=gen)
        loss_sum, correct = 0.0, 0
        for i in range(steps_per_epoch):
            idx = order[i * args.batch_size : (i + 1) * args.batch_size]
            xb = ((augment(x_train[idx], gen) if args.augment else x_train[idx]) - mean) / std
            yb = y_train[idx]
            for group in opt.param_groups:
                group["lr"] = lr_at(step, total, args.warmup_epochs * steps_per_epoch, args.lr)
            logits = model(xb)
            loss = F.cross_entropy(logits, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            loss_sum += loss.item()
            correct += (logits.argmax(1) == yb).sum().item()
        print(
            f"epoch {epoch + 1}/{args.epochs} loss {loss_sum / steps_per_epoch:.4f} "
            f"train acc {correct / (steps_per_epoch * args.batch_size):.4f} "
            f"elapsed {time.time() - start:.0f}s",
            flush=True,
        )

    acc = held_out_accuracy(model, kept_classes(dict(np.load(args.test)), kept), mean, std)
    print(f"test accuracy {acc:.4f}; train time {time.time() - start:.0f}s", flush=True)
    write_model(model, args, start, [CIFAR10_CLASSES[c] for c in kept])
    print(json.dumps({"test_accuracy": acc}))


def kept_classes(data: dict, kept: list[int]) -> dict:
    """The images of the `kept` classes of `data` (x, y), their labels renumbered 0, 1, ... in `kept`'s order."""
    if kept == list(range(10)):
        return data
    index = np.flatnonzero(np.isin(data["y"], kept))
    renumber = np.full(10, -1)
    renumber[kept] = np.arange(len(kept))
    return {"x": data["x"][index], "y": renumber[data["y"][index]]}


def held_out_accuracy(model, test: dict, mean: torch.Tensor, std: torch.Tensor) -> float:
    """`model`'s accuracy on the test set `test` (x, y), normalised by `mean` and `std`."""
    model.eval()
    x_test = torch.from_numpy(test["x"]).permute(0, 3, 1, 2).float().div_(255)
    with torch.no_grad():
        logits = torch.cat([model((x_test[i : i + 1000] - mean) / std) for i in range(0, len(x_test), 1000)])
    return float((logits.argmax(1).numpy() == test["y"]).mean())


def write_model(model, args: argparse.Namespace, start: float, class_names: list[str]) -> None:
    """NAME.safetensors, its sidecar (the run's hyperparameters and time since `start`) and NAME.onnx in --out."""
    out = Path(args.out)
    meta = dict(
        arch=args.arch,
        num_classes=len(class_names),
        input_size=[32, 32],
        mean=list(CIFAR10_MEAN),
        std=list(CIFAR10_STD),
        output="logits",
        class_names=class_names,
    )
    save_safetensors(model, out / f"{args.name}.safetensors")
    # Data files by name only: the sidecar must not record a folder of the machine that trained it.
    hp = {k: Path(v).name if k in ("data", "test", "out") else v for k, v in vars(args).items()}
    training = dict(HP=hp, seconds=round(time.time() - start))
    write_sidecar(out / f"{args.name}.json", dict(meta, training=training))
    export_onnx(model, out / f"{args.name}.onnx", meta)


if __name__ == "__main__":
    main()
