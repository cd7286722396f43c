"""Every hyperparameter of a fine-tuning run, and the checks on them.

Free of torch, so that the CLI shows the defaults in `--help` without importing torch.
"""

from __future__ import annotations

import dataclasses
import math

from macs_audit.metrics.conventions import MARGIN_TARGET
from macs_audit.models.config import CIFAR10_MEAN, CIFAR10_STD
from macs_audit.settings.presets import PRESETS as ALL_PRESETS
from macs_audit.views.perturbation_params import TRAIN_BLUR_RANGE, TRAIN_NOISE_RANGE

OBJECTIVES = ("macs", "ce", "focal", "label-smoothing", "mixup")
OPTIMIZERS = ("sgd", "adamw")
KL_DIRECTIONS = ("clean||pert", "pert||clean")
STOP_GRADS = ("clean", "pert", "none")
BN_STATS = ("clean", "both")
# MaCS presets (settings/presets.py, applied under the flags and the spec by settings/resolve.py): "calibrated" is
# the defaults below.
PRESETS: dict[str, dict] = ALL_PRESETS["finetune"]
# Training from a random initialisation (--from-scratch): the schedule sample_models/train_sample.py
# trained the sample model with (16 epochs of 256, peak SGD lr 0.2 after 2 warm-up epochs, cosine to 0,
# weight decay 5e-4), as fractions the loop reads. Flags given on the command line win over it.
FROM_SCRATCH: dict = dict(
    epochs=16.0, batch_size=256, optimizer="sgd", lr=0.2, momentum=0.9, warmup=2 / 16, weight_decay=5e-4
)


@dataclasses.dataclass
class FinetuneOptions:
    """Every hyperparameter of a fine-tuning run, in one place. Saved with each checkpoint."""

    objective: str = "macs"  # macs | ce | focal | label-smoothing | mixup
    preset: str = "calibrated"  # the MaCS preset the values below started from (PRESETS)
    epochs: float = 1.0  # passes over the training split; a fraction stops mid-epoch
    batch_size: int = 128
    optimizer: str = "sgd"  # sgd (Nesterov, momentum 0.9) or adamw
    lr: float = 0.02  # peak learning rate: low, the model is already trained
    momentum: float = 0.9
    weight_decay: float = 5e-4  # not applied to biases and norm parameters
    warmup: float = 0.1  # fraction of the steps with a linear warm-up, then cosine to 0
    val_fraction: float = 0.1  # class-stratified split held out of the training data
    split_seed: int = 0  # seed of that split, apart from `seed` so seeds share one split
    augment: bool = True  # random crop (4 px reflect padding) + horizontal flip
    seed: int = 0  # data order, augmentation, perturbations, mixup
    # MaCS (docs/method.md §1). The defaults are PRESETS["calibrated"], chosen on a validation split by
    # the trade-off map in docs/finetune-experiment.md (Delta and lambda_m by the sweep before it).
    delta: float = MARGIN_TARGET  # target logit margin Delta of the hinge-squared term (the audit's margin target)
    lambda_m: float = 0.1  # weight of the margin term
    lambda_c: float = 1.0  # weight of the consistency (KL) term
    kl_direction: str = "clean||pert"  # KL(p_clean || p_pert), the paper's form; or "pert||clean"
    stop_grad: str = "clean"  # view detached inside the KL: clean (target) | pert | none
    ce_on_perturbed: bool = False  # L_CE the mean of CE(clean) and CE(perturbed), not CE(clean) alone
    # Views whose batch statistics update the batch-norm running statistics (the ones evaluation uses):
    # "clean" keeps them those of clean images; "both" lets the perturbed pass shift them too.
    bn_stats: str = "clean"
    blur_range: tuple[float, float] = TRAIN_BLUR_RANGE  # per-sample Gaussian blur sigma of T(x), pixels at 32 px
    noise_range: tuple[float, float] = TRAIN_NOISE_RANGE  # per-sample Gaussian noise sigma of T(x), [0,1] units
    # Baselines.
    focal_gamma: float = 3.0
    smoothing: float = 0.1
    mixup_alpha: float = 0.2
    # Model preprocessing (filled from the model's config): images in [0,1] -> (x - mean) / std.
    input_size: tuple[int, int] = (32, 32)
    mean: tuple[float, ...] = CIFAR10_MEAN
    std: tuple[float, ...] = CIFAR10_STD
    # Runtime. AMP (bf16 autocast) and channels_last apply on CUDA only.
    device: str = "cpu"
    amp: bool = True
    eval_batch_size: int = 1000
    checkpoint_every: int = 0  # also checkpoint every N optimizer steps (0: at epoch ends only)
    from_scratch: bool = False  # train the architecture from a random initialisation (seeded by `seed`)

    def split(self, labels) -> tuple:
        """(validation positions, training positions) of `labels`: the class-stratified split a run holds out."""
        from macs_audit.data.splits import stratified_split

        return stratified_split(labels, self.val_fraction, self.split_seed)

    def checked_split(self, labels) -> tuple:
        """`split(labels)`, checked to train: at least one batch of training images and a non-empty validation
        split (UsageError otherwise, naming the option to change). A run checks it as soon as the data is read,
        before the start model's audit and before anything is written."""
        from macs_audit.errors import UsageError

        val_idx, train_idx = self.split(labels)
        if len(train_idx) < self.batch_size:
            raise UsageError(
                f"the training split has {len(train_idx)} images, fewer than --batch-size {self.batch_size}; "
                "use a smaller batch or more data"
            )
        if len(val_idx) == 0:
            raise UsageError(f"--val-fraction {self.val_fraction} holds out no images of {len(labels)}; raise it")
        return val_idx, train_idx

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        for key in ("blur_range", "noise_range", "input_size", "mean", "std"):
            out[key] = list(out[key])
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "FinetuneOptions":
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        for key in ("blur_range", "noise_range", "input_size", "mean", "std"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)

    def with_from_scratch(self, keep: frozenset[str] = frozenset()) -> "FinetuneOptions":
        """These options for training from a random initialisation: FROM_SCRATCH's schedule, except the fields
        in `keep` (set explicitly)."""
        values = {k: v for k, v in FROM_SCRATCH.items() if k not in keep}
        return dataclasses.replace(self, from_scratch=True, **values)

    def validate(self) -> "FinetuneOptions":
        """Raise UsageError (one line, naming the flag) for values that cannot work: first any number that is not
        finite (`--epochs inf`, `--lr nan`: every float field, and each value of the ranges and the
        normalisation), then each option's own range."""
        from macs_audit.errors import UsageError

        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            values = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, float) and not math.isfinite(v) for v in values):
                shown = list(value) if isinstance(value, tuple) else value
                raise UsageError(f"--{field.name.replace('_', '-')} must be a finite number, got {shown}")
        checks = [
            (
                self.objective in OBJECTIVES,
                f"--objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}",
            ),
            (self.optimizer in OPTIMIZERS, f"--optimizer must be sgd or adamw, got {self.optimizer!r}"),
            (self.kl_direction in KL_DIRECTIONS, f"--kl-direction must be one of {', '.join(KL_DIRECTIONS)}"),
            (self.stop_grad in STOP_GRADS, f"--stop-grad must be one of {', '.join(STOP_GRADS)}"),
            (self.bn_stats in BN_STATS, f"--bn-stats must be one of {', '.join(BN_STATS)}, got {self.bn_stats!r}"),
            (self.epochs > 0, f"--epochs must be positive, got {self.epochs}"),
            (self.batch_size >= 2, f"--batch-size must be at least 2, got {self.batch_size}"),
            (
                self.checkpoint_every >= 0,
                f"--checkpoint-every must be a number of steps, 0 or more, got {self.checkpoint_every}",
            ),
            (self.lr > 0, f"--lr must be positive, got {self.lr}"),
            (0 <= self.warmup < 1, f"--warmup must be a fraction in [0, 1), got {self.warmup}"),
            (0 < self.val_fraction < 1, f"--val-fraction must be in (0, 1), got {self.val_fraction}"),
            (
                self.delta >= 0 and self.lambda_m >= 0 and self.lambda_c >= 0,
                "--delta, --lambda-m and --lambda-c must be non-negative",
            ),
            (
                len(self.blur_range) == 2 and 0 <= self.blur_range[0] <= self.blur_range[1],
                f"--blur-range must be LO,HI with 0 <= LO <= HI, got {list(self.blur_range)}",
            ),
            (
                len(self.noise_range) == 2 and 0 <= self.noise_range[0] <= self.noise_range[1],
                f"--noise-range must be LO,HI with 0 <= LO <= HI, got {list(self.noise_range)}",
            ),
            (self.focal_gamma >= 0, "--focal-gamma must be non-negative"),
            (0 <= self.smoothing < 1, "--smoothing must be in [0, 1)"),
            (self.mixup_alpha > 0, "--mixup-alpha must be positive"),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(message)
        return self
