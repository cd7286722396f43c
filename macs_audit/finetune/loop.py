"""The fine-tuning loop: flat and readable (airbench / nanoGPT style).

The whole training split is one uint8 tensor; each step takes a slice of a seeded permutation,
crops and flips it, and applies the objective. The learning rate is a function of the step
(linear warm-up, cosine to zero). A checkpoint is written atomically after every epoch, and with
`checkpoint_every` every N optimizer steps as well, with everything a resumed run needs to continue
bit-identically on CPU: weights, optimizer state, step, epoch, the generators' states (data order,
augmentation, mixup, perturbations) and torch's global RNG; inside an epoch also its data order, how
far through it the run got, and the running sums of the loss terms. The core never prints: progress
goes to `progress(description, done, total, terms)`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from macs_audit import distributed
from macs_audit.atomic import atomic_path
from macs_audit.auditing import Loop, evaluate_view
from macs_audit.data.sources import Source
from macs_audit.distributed import SINGLE, Context
from macs_audit.errors import InputError, UsageError
from macs_audit.finetune import losses
from macs_audit.finetune.options import FinetuneOptions
from macs_audit.models.backend import OutputAdapter, one_line
from macs_audit.models.config import ModelConfig
from macs_audit.models.preprocessing import resize_and_normalize
from macs_audit.pixels import unit_float_nchw
from macs_audit.progress import ProgressFn, Stage
from macs_audit.seeding import derive_seed

CHECKPOINT_FORMAT = "macs-audit-finetune-checkpoint/1"
# Options that may change between a run and its resumption without changing the result on CPU.
RUNTIME_OPTIONS = ("device", "amp", "eval_batch_size", "checkpoint_every")


@dataclasses.dataclass
class FinetuneResult:
    model: torch.nn.Module  # the fine-tuned model, in eval mode, on options.device
    history: list[dict]  # one entry per epoch: step, lr, mean loss terms, validation metrics
    steps: int  # optimizer steps taken in total (including before a resume)
    resumed_from_epoch: int | None  # epochs complete in the checkpoint resumed from
    split: dict  # sizes and seed of the train/validation split
    resumed_from_step: int | None = None  # its optimizer steps (past an epoch end for a step checkpoint)


@dataclasses.dataclass
class TrainData:
    x_train: torch.Tensor  # uint8 (N, C, H, W), CPU
    y_train: torch.Tensor  # int64 (N,)
    val: Source  # the validation split, held in memory (uint8 N, H, W, C)
    num_classes: int
    fingerprint: str  # identifies the split, so --resume refuses different data


def lr_at(step: int, total: int, warmup: int, peak: float) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay to 0 at `total`."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def augment(x: torch.Tensor, generator: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random crop with `pad`-pixel reflect padding and a random horizontal flip, per sample."""
    n, c, h, w = x.shape
    dev = x.device
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(dev)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(dev)
    flip = (torch.rand(n, generator=generator) < 0.5).to(dev)
    padded = F.pad(x, (pad, pad, pad, pad), mode="reflect")
    rows = dy[:, None] + torch.arange(h, device=dev)
    cols = dx[:, None] + torch.arange(w, device=dev)
    cols = torch.where(flip[:, None], cols.flip(1), cols)  # a flip is reversed column order
    return padded[
        torch.arange(n, device=dev)[:, None, None, None],
        torch.arange(c, device=dev)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]


def load_train_data(source, options: FinetuneOptions) -> TrainData:
    """Read the whole source once and hold out a class-stratified validation split."""
    labels = np.asarray(source.labels, dtype=np.int64)
    val_idx, train_idx = options.checked_split(labels)
    images = np.asarray(source.images(np.arange(len(labels))))
    if images.dtype != np.uint8 or images.ndim != 4:
        raise InputError(f"training images must be uint8 (N, H, W, C), got {images.dtype} {images.shape}")
    x_train = torch.from_numpy(images[train_idx]).permute(0, 3, 1, 2).contiguous()
    y_train = torch.from_numpy(labels[train_idx])
    val_images = images[val_idx]
    val = Source(
        f"{source.name}: validation split",
        source.format,
        labels[val_idx],
        list(source.class_names),
        lambda positions: val_images[positions],
    )
    digest = hashlib.sha256(labels.tobytes() + train_idx.tobytes() + str(images.shape).encode()).hexdigest()[:16]
    return TrainData(x_train, y_train, val, int(source.num_classes), digest)


class Preprocess:
    """[0,1] images -> the model's input: resize if needed, (x - mean) / std, channels_last on CUDA."""

    def __init__(self, options: FinetuneOptions, device: torch.device):
        self.size = tuple(options.input_size)
        self.mean = torch.tensor(options.mean, device=device).view(1, -1, 1, 1)
        self.std = torch.tensor(options.std, device=device).view(1, -1, 1, 1)
        self.channels_last = device.type == "cuda"

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = resize_and_normalize(x, self.size, self.mean, self.std)
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on weight matrices and kernels only, not on biases and norm parameters."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, options: FinetuneOptions) -> torch.optim.Optimizer:
    groups = param_groups(model, options.weight_decay)
    if options.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=options.lr)
    return torch.optim.SGD(groups, lr=options.lr, momentum=options.momentum, nesterov=options.momentum > 0)


@contextlib.contextmanager
def running_stats_kept(model: torch.nn.Module):
    """Batch norm inside runs in training mode (normalising by the batch's own statistics) but leaves
    the running statistics, which evaluation uses, as they were.

    The pass updates copies: the originals are swapped back afterwards, not overwritten, because
    autograd keeps the updated buffers for the backward pass."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    names = ("running_mean", "running_var", "num_batches_tracked")
    norms = [m for m in norms if all(getattr(m, name) is not None for name in names)]
    kept = [tuple(getattr(m, name) for name in names) for m in norms]
    for m in norms:
        for name in names:
            setattr(m, name, getattr(m, name).clone())
    try:
        yield
    finally:
        for m, buffers in zip(norms, kept, strict=True):
            for name, buffer in zip(names, buffers, strict=True):
                setattr(m, name, buffer)


def training_step(
    model,
    images: torch.Tensor,
    labels: torch.Tensor,
    options: FinetuneOptions,
    prep: Preprocess,
    data_gen: torch.Generator,
    view_gen: torch.Generator,
    amp: bool = False,
):
    """Forward and backward for one batch (gradients accumulate into .grad); returns (loss, terms).

    `images` are augmented, in [0, 1]. The loss is returned detached: the caller checks it is
    finite before the optimizer step. Forward passes run under bf16 autocast when `amp`.
    """

    def forward(x, update_bn_stats: bool = True):
        keep_stats = contextlib.nullcontext() if update_bn_stats else running_stats_kept(model)
        with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=amp), keep_stats:
            return model(prep(x))

    if options.objective == "macs":
        t = losses.macs_backward(forward, images, labels, options, view_gen)
        return t.total.detach(), {"ce": t.ce, "margin": t.margin, "kl": t.consistency}
    loss = losses.OBJECTIVE_LOSSES[options.objective](forward, images, labels, options, data_gen)
    loss.backward()
    return loss.detach(), {}


class TrainingPredictor:
    """The model being fine-tuned as a Predictor, so that the audit's loop (`audit.evaluate_view`: batches,
    views, accumulators) reads it as it reads a model file: float [0, 1] NCHW batches through `Preprocess`,
    in eval mode without gradients (the mode the model was in is restored), under bf16 autocast where
    `options.amp` applies (CUDA). Its logits are returned as the model gives them: the training loss is
    checked before every step."""

    backend = "torch"

    def __init__(self, model: torch.nn.Module, options: FinetuneOptions, num_classes: int):
        self.model = model
        self.torch_device = torch.device(options.device)
        self.device = str(self.torch_device)
        self.prep = Preprocess(options, self.torch_device)
        self.amp = options.amp and self.torch_device.type == "cuda"
        self.config = ModelConfig(
            num_classes=num_classes, input_size=options.input_size, mean=options.mean, std=options.std, output="logits"
        )
        self.output = OutputAdapter("logits", num_classes)
        self.info: dict[str, Any] = {"format": "in memory", "backend": self.backend, "device": self.device}

    @property
    def num_classes(self) -> int | None:
        return self.config.num_classes

    @torch.no_grad()
    def predict(self, images) -> np.ndarray:
        x = images if torch.is_tensor(images) else torch.from_numpy(np.asarray(images, dtype=np.float32))
        x = x.to(self.torch_device, non_blocking=True)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.autocast(self.torch_device.type, dtype=torch.bfloat16, enabled=self.amp):
                return self.model(self.prep(x)).float().cpu().numpy()
        finally:
            self.model.train(was_training)


def validate(model, data: TrainData, options: FinetuneOptions) -> dict:
    """The validation split's metrics, by the audit's loop and accumulators."""
    predictor = TrainingPredictor(model, options, data.num_classes)
    acc, _ = evaluate_view(predictor, data.val, data.num_classes, Loop(options.eval_batch_size))
    m = acc.compute()
    return {k: m[k] for k in ("accuracy", "ece", "nll", "brier", "mean_margin")}


def save_checkpoint(path: Path, state: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def check_resume(checkpoint: Path | None, resume: bool) -> None:
    """--resume (`resume`) needs the checkpoint it continues."""
    if resume and (checkpoint is None or not checkpoint.is_file()):
        raise UsageError(f"--resume: no checkpoint at {checkpoint}; run without --resume to start")


def load_checkpoint(path: Path) -> dict:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise InputError(f"cannot read checkpoint {path}: {one_line(exc)}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise InputError(f"{path} is not a macs-audit fine-tuning checkpoint")
    return state


def _check_resumable(state: dict, options: FinetuneOptions, data: TrainData, path: Path) -> None:
    # An option a checkpoint predates had its default value then.
    saved = {k: v for k, v in {**FinetuneOptions().to_dict(), **state["options"]}.items() if k not in RUNTIME_OPTIONS}
    now = {k: v for k, v in options.to_dict().items() if k not in RUNTIME_OPTIONS}
    changed = [k for k in now if saved.get(k) != now[k]]
    if changed:
        key = changed[0]
        raise UsageError(
            f"{path} was made with {key}={saved.get(key)!r}, not {now[key]!r}; "
            "resume with the same settings, or start a new run in another --out directory"
        )
    if state["data"] != data.fingerprint:
        raise UsageError(f"{path} was made on different training data; resume with the same --data")


def finetune(
    model: torch.nn.Module,
    train_source,
    options: FinetuneOptions,
    progress: ProgressFn | None = None,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    ctx: Context = SINGLE,
) -> FinetuneResult:
    """Fine-tune `model` (a torch module taking normalised images) on `train_source` (a data.Source).

    With `checkpoint`, state is saved there after every epoch and every `options.checkpoint_every`
    steps; with `resume`, training continues from it, mid-epoch if that is where it was saved. A NaN
    or infinite loss raises InputError and leaves the last good checkpoint in place.

    Under torchrun (`ctx`), the model is wrapped in DistributedDataParallel: every rank draws the
    same permutation and takes every world_size-th image of each global batch, DDP averages the
    gradients, and rank 0 alone writes the checkpoint (all ranks read it on --resume).
    """
    options.validate()
    if ctx.active and options.batch_size % ctx.world_size:
        raise UsageError(f"--batch-size {options.batch_size} must be divisible by the {ctx.world_size} processes")
    run = _Run(model, train_source, options, Path(checkpoint) if checkpoint is not None else None, ctx)
    if resume:
        run.resume()
    resumed_from, resumed_step = (run.start_epoch, run.step) if resume else (None, None)
    for epoch in range(run.start_epoch, run.n_epochs):
        run.train_epoch(epoch, progress)
    run.model.eval()
    split = {
        "n_train": run.n_train,
        "n_val": len(run.data.val),
        "val_fraction": options.val_fraction,
        "seed": options.split_seed,
        "stratified": True,
    }
    return FinetuneResult(run.model, run.history, run.step, resumed_from, split, resumed_from_step=resumed_step)


class _Run:
    """One fine-tuning run as it trains: the model (and what a step runs, the model or its DDP wrapper under
    torchrun), its optimizer, the seeded generators, the schedule, where the run stands (step, epochs done, and
    inside an epoch: steps done, its data order, the loss terms' sums) and the checkpoint it writes."""

    def __init__(
        self, model: torch.nn.Module, train_source: Any, options: FinetuneOptions, checkpoint: Path | None, ctx: Context
    ):
        self.options, self.checkpoint, self.ctx = options, checkpoint, ctx
        self.device = device = torch.device(options.device)
        self.data = data = load_train_data(train_source, options)
        self.n_train = len(data.y_train)
        self.steps_per_epoch = self.n_train // options.batch_size
        self.total_steps = max(1, round(options.epochs * self.steps_per_epoch))
        self.n_epochs = math.ceil(self.total_steps / self.steps_per_epoch)
        self.warmup = round(options.warmup * self.total_steps)

        torch.manual_seed(derive_seed(options.seed, "global"))  # dropout / drop-path, if the model has any
        self.data_gen = torch.Generator().manual_seed(derive_seed(options.seed, "data"))
        self.view_gen = torch.Generator(device=device).manual_seed(derive_seed(options.seed, "view"))
        model = model.to(device)
        if device.type == "cuda":
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        self.optimizer = make_optimizer(model, options)
        self.trained = model  # what a step runs: the model itself, or its DDP wrapper under torchrun
        if ctx.active:
            from torch.nn.parallel import DistributedDataParallel

            self.trained = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        self.prep = Preprocess(options, device)
        self.amp = options.amp and device.type == "cuda"

        self.step, self.start_epoch = 0, 0
        self.history: list[dict] = []
        self.position = 0  # inside an epoch: the steps done, its data order and the loss terms' sums
        self.order: torch.Tensor | None = None
        self.sums: dict[str, float] = {}
        self.last_saved = ""  # what the checkpoint on disk holds, for the NaN message

    def resume(self) -> None:
        """Continue from the checkpoint: weights, optimizer, where the run stood and every generator's state."""
        check_resume(self.checkpoint, True)
        assert self.checkpoint is not None
        state = load_checkpoint(self.checkpoint)
        _check_resumable(state, self.options, self.data, self.checkpoint)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.start_epoch, self.history = state["step"], state["epoch"], list(state["history"])
        self.data_gen.set_state(state["data_gen"])
        self.view_gen.set_state(state["view_gen"])
        torch.set_rng_state(state["torch_rng"])
        if self.device.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
        if state.get("position"):  # saved inside an epoch: continue it where it stopped
            self.position, self.order, self.sums = state["position"], state["order"], dict(state["sums"])
        self.last_saved = _saved_at(self.step, self.start_epoch, self.position)

    def save(self, epoch_done: int, position: int) -> None:
        """Checkpoint after `epoch_done` whole epochs and `position` steps of the next one."""
        if self.checkpoint is not None and self.ctx.is_main:
            save_checkpoint(
                self.checkpoint,
                {
                    "format": CHECKPOINT_FORMAT,
                    "model": self.model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "step": self.step,
                    "epoch": epoch_done,
                    "position": position,
                    "order": self.order if position else None,
                    "sums": dict(self.sums) if position else None,
                    "options": self.options.to_dict(),
                    "data": self.data.fingerprint,
                    "data_gen": self.data_gen.get_state(),
                    "view_gen": self.view_gen.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
                    "history": self.history,
                },
            )
        self.last_saved = _saved_at(self.step, epoch_done, position)
        distributed.barrier(self.ctx)  # the checkpoint is complete before any rank moves on

    def train_epoch(self, epoch: int, progress: ProgressFn | None) -> None:
        """Epoch `epoch` (from where a resumed one stopped), then its validation, history entry and checkpoint."""
        self.model.train()
        started = time.perf_counter()
        if self.order is None:  # a new epoch (a resumed one keeps the order it was saved with)
            self.order = torch.randperm(self.n_train, generator=self.data_gen)
            self.sums = {}
        steps_now = min(self.steps_per_epoch, self.total_steps - (self.step - self.position))
        epoch_stage = Stage(f"epoch {epoch + 1}/{self.n_epochs}", unit="steps")
        validation_stage = Stage(f"{epoch_stage.name} validation", unit="")
        for i in range(self.position, steps_now):
            shown = self.optimizer_step(epoch, i)
            if self.options.checkpoint_every and self.step % self.options.checkpoint_every == 0 and i + 1 < steps_now:
                self.save(epoch, i + 1)  # inside the epoch; its end is saved below, after validation
            if progress:
                progress(epoch_stage, i + 1, steps_now, shown)
        if progress:
            progress(validation_stage, 0, 1, None)
        entry: dict[str, Any] = {
            "epoch": epoch + 1,
            "step": self.step,
            "lr": lr_at(self.step - 1, self.total_steps, self.warmup, self.options.lr),
            "train": {k: v / max(1, steps_now) for k, v in self.sums.items()},
            "val": validate(self.model, self.data, self.options),
            "seconds": round(time.perf_counter() - started, 2),
        }
        self.history.append(entry)
        self.order, self.position = None, 0
        self.save(epoch + 1, 0)
        if progress:
            val = entry["val"]
            progress(validation_stage, 1, 1, {"val_acc": val["accuracy"], "val_ece": val["ece"], "val_nll": val["nll"]})

    def optimizer_step(self, epoch: int, i: int) -> dict[str, float]:
        """Step `i` of epoch `epoch` on its slice of the epoch's order; returns what the progress line shows (the
        loss, its terms, the learning rate). A loss that is not finite on any rank is an InputError, before the
        weights change."""
        options, data, device, ctx = self.options, self.data, self.device, self.ctx
        assert self.order is not None
        idx = self.order[i * options.batch_size : (i + 1) * options.batch_size][ctx.rank :: ctx.world_size]
        images = unit_float_nchw(data.x_train[idx].to(device, non_blocking=True))
        labels = data.y_train[idx].to(device, non_blocking=True)
        if options.augment:
            images = augment(images, self.data_gen)
        lr = lr_at(self.step, self.total_steps, self.warmup, options.lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        loss, terms = training_step(
            self.trained, images, labels, options, self.prep, self.data_gen, self.view_gen, self.amp
        )
        value = distributed.mean_over_ranks(loss, ctx)  # every rank sees a NaN on any rank
        if not math.isfinite(value):  # checked before the step: the weights stay finite
            kept = (
                f"the last good checkpoint {self.checkpoint} ({self.last_saved}) is kept"
                if self.checkpoint and self.last_saved
                else "no checkpoint was written yet"
            )
            raise InputError(
                f"the {options.objective} loss became {value} at step {self.step + 1} (epoch {epoch + 1}); "
                f"{kept}; lower --lr or check the data"
            )
        self.optimizer.step()
        self.step += 1
        shown = {"loss": value, **{k: float(v) for k, v in terms.items()}}
        for k, v in shown.items():
            self.sums[k] = self.sums.get(k, 0.0) + v
        return {**shown, "lr": lr}


def _saved_at(step: int, epoch_done: int, position: int) -> str:
    """Where a checkpoint stands, as the NaN message names it: 'epoch 1', or 'step 6, inside epoch 2'."""
    return f"step {step}, inside epoch {epoch_done + 1}" if position else f"epoch {epoch_done}"
