"""Training objectives: MaCS (arXiv 2603.05812; conventions in docs/method.md) and the baselines CE, focal,
label smoothing and mixup.

A new single-pass objective is one function and one row of OBJECTIVE_LOSSES (plus its name in
options.OBJECTIVES, which --help reads without torch); the loop calls it through the table. MaCS, with its
two views and split backward, is `macs_backward`, which the loop calls for the "macs" objective.

Every loss upcasts the logits to float32 and runs with autocast off, so mixed-precision training
computes the same loss as float32 training (softmax in bf16 saturates).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from macs_audit.finetune.options import KL_DIRECTIONS, STOP_GRADS, FinetuneOptions
from macs_audit.metrics.margins import logit_margin
from macs_audit.views import perturbations

_DEFAULTS = FinetuneOptions()  # the losses' defaults are the options' (finetune/options.py, the one list)


def _fp32(logits: torch.Tensor) -> torch.Tensor:
    return logits.float()


def _no_autocast(logits: torch.Tensor):
    return torch.autocast(logits.device.type, enabled=False)


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """mean_i -log softmax(z_i)[y_i]."""
    with _no_autocast(logits):
        return F.cross_entropy(_fp32(logits), labels)


def focal_loss(logits: torch.Tensor, labels: torch.Tensor, gamma: float = _DEFAULTS.focal_gamma) -> torch.Tensor:
    """Focal loss (Lin et al. 2017), mean_i -(1 - p_t)^gamma log p_t; gamma 0 is cross-entropy."""
    with _no_autocast(logits):
        log_pt = F.log_softmax(_fp32(logits), dim=1).gather(1, labels[:, None]).squeeze(1)
        return (-(1 - log_pt.exp()).pow(gamma) * log_pt).mean()


def label_smoothing_loss(
    logits: torch.Tensor, labels: torch.Tensor, smoothing: float = _DEFAULTS.smoothing
) -> torch.Tensor:
    """Cross-entropy against q = (1 - eps) * onehot(y) + eps / K (Szegedy et al. 2016)."""
    with _no_autocast(logits):
        log_p = F.log_softmax(_fp32(logits), dim=1)
        nll = -log_p.gather(1, labels[:, None]).squeeze(1)
        uniform = -log_p.mean(dim=1)
        return ((1 - smoothing) * nll + smoothing * uniform).mean()


def mixup_batch(images: torch.Tensor, labels: torch.Tensor, alpha: float, generator: torch.Generator):
    """mixup (Zhang et al. 2018): x = lam x_i + (1 - lam) x_perm(i), lam ~ Beta(alpha, alpha) per batch.

    Returns (mixed images, labels, permuted labels, lam). lam is drawn by numpy from a seed taken
    from `generator` (torch has no seeded Beta sampler), so all randomness comes from one generator.
    """
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
    lam = float(np.random.default_rng(seed).beta(alpha, alpha)) if alpha > 0 else 1.0
    perm = torch.randperm(len(labels), generator=generator, device=generator.device).to(images.device)
    return lam * images + (1 - lam) * images[perm], labels, labels[perm], lam


def mixup_loss(logits: torch.Tensor, labels_a: torch.Tensor, labels_b: torch.Tensor, lam: float) -> torch.Tensor:
    """lam * CE(z, y_a) + (1 - lam) * CE(z, y_b), the mixup objective."""
    return lam * cross_entropy(logits, labels_a) + (1 - lam) * cross_entropy(logits, labels_b)


@dataclasses.dataclass
class MacsTerms:
    total: torch.Tensor  # L = L_CE + lambda_m L_m + lambda_c L_c (differentiable)
    ce: torch.Tensor  # the unweighted terms, detached, for the progress bar and logs
    margin: torch.Tensor
    consistency: torch.Tensor


def macs_loss(
    clean_logits: torch.Tensor, pert_logits: torch.Tensor, labels: torch.Tensor, options: FinetuneOptions = _DEFAULTS
) -> MacsTerms:
    """The MaCS objective on clean logits z = f(x) and perturbed z~ = f(T(x)), with the options' delta, lambda_m,
    lambda_c, kl_direction, stop_grad and ce_on_perturbed.

    L_CE = CE(z, y) on the clean view only, or with `ce_on_perturbed` (CE(z, y) + CE(z~, y)) / 2;
    L_m = mean max(0, Delta - gamma)^2 with gamma the clean margin; L_c = mean KL(p || p~)
    ("clean||pert", the paper's form) or KL(p~ || p) ("pert||clean").
    `stop_grad` names the view whose distribution is detached inside the KL term only ("clean":
    the clean prediction is the fixed target, UDA/VAT style); L_m always trains the clean view.
    """
    kl_direction, stop_grad = options.kl_direction, options.stop_grad
    if kl_direction not in KL_DIRECTIONS:
        raise ValueError(f"kl_direction must be one of {KL_DIRECTIONS}, got {kl_direction!r}")
    if stop_grad not in STOP_GRADS:
        raise ValueError(f"stop_grad must be one of {STOP_GRADS}, got {stop_grad!r}")
    with _no_autocast(clean_logits):
        z, z_pert = _fp32(clean_logits), _fp32(pert_logits)
        ce = F.cross_entropy(z, labels)
        if options.ce_on_perturbed:
            ce = (ce + F.cross_entropy(z_pert, labels)) / 2
        margin = F.relu(options.delta - logit_margin(z, labels)).pow(2).mean()
        log_p = F.log_softmax(z.detach() if stop_grad == "clean" else z, dim=1)
        log_q = F.log_softmax(z_pert.detach() if stop_grad == "pert" else z_pert, dim=1)
        if kl_direction == "pert||clean":
            log_p, log_q = log_q, log_p
        # KL(p || q) = sum_k p_k (log p_k - log q_k), averaged over the batch.
        consistency = (log_p.exp() * (log_p - log_q)).sum(dim=1).mean()
        total = ce + options.lambda_m * margin + options.lambda_c * consistency
    return MacsTerms(total=total, ce=ce.detach(), margin=margin.detach(), consistency=consistency.detach())


Forward = Callable[[torch.Tensor], torch.Tensor]


class ViewForward(Protocol):
    """The model's forward pass on [0, 1] images; `update_bn_stats` False keeps the batch-norm running
    statistics as they were (finetune.loop.running_stats_kept)."""

    def __call__(self, x: torch.Tensor, update_bn_stats: bool = True) -> torch.Tensor: ...


def macs_backward(
    forward: ViewForward,
    images: torch.Tensor,
    labels: torch.Tensor,
    options: FinetuneOptions,
    view_gen: torch.Generator,
) -> MacsTerms:
    """The MaCS objective on augmented `images` and their training view T(x) (drawn from `view_gen`), its
    gradients accumulated into .grad; returns its terms (`total` not yet detached).

    Two forward passes (clean, perturbed; each with its own batch-norm statistics), both views sharing the
    crop/flip. With the clean view detached inside the KL (the default), the gradient splits exactly: clean
    pass <- CE + margin, perturbed pass <- KL (and its half of CE with ce_on_perturbed), so the clean graph
    is freed before the perturbed pass and memory stays that of one batch."""
    perturbed = perturbations.training_view(images, view_gen, options.blur_range, options.noise_range)
    pert_updates_bn = options.bn_stats == "both"
    if options.stop_grad == "clean":
        clean = forward(images)
        # KL of a view with itself is 0, and a detached view's CE has no gradient.
        macs_loss(clean, clean.detach(), labels, options).total.backward()
        terms = macs_loss(clean.detach(), forward(perturbed, pert_updates_bn), labels, options)  # grads to T(x) only
    elif options.stop_grad == "pert" and not options.ce_on_perturbed:
        with torch.no_grad():  # the perturbed view is only a target: no graph needed
            pert = forward(perturbed, pert_updates_bn)
        terms = macs_loss(forward(images), pert, labels, options)
    else:
        terms = macs_loss(forward(images), forward(perturbed, pert_updates_bn), labels, options)
    terms.total.backward()
    return terms


def _mixup_objective(
    forward: Forward, images: torch.Tensor, labels: torch.Tensor, options: Any, generator: torch.Generator
) -> torch.Tensor:
    mixed, y_a, y_b, lam = mixup_batch(images, labels, options.mixup_alpha, generator)
    return mixup_loss(forward(mixed), y_a, y_b, lam)


# The objectives of one forward pass: name -> loss(forward, augmented images, labels, options, data
# generator). MaCS, with its two views and split backward, is `macs_backward`.
OBJECTIVE_LOSSES: dict[str, Callable[[Forward, torch.Tensor, torch.Tensor, Any, torch.Generator], torch.Tensor]] = {
    "ce": lambda forward, x, y, options, gen: cross_entropy(forward(x), y),
    "focal": lambda forward, x, y, options, gen: focal_loss(forward(x), y, options.focal_gamma),
    "label-smoothing": lambda forward, x, y, options, gen: label_smoothing_loss(forward(x), y, options.smoothing),
    "mixup": _mixup_objective,
}
