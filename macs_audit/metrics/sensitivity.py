"""Input sensitivity of the margin: L^ = mean_i ||grad_x gamma(x_i)||_2 in [0,1] pixel space.

Torch models: exact per-sample gradients by autograd. ONNX models: a finite-difference estimate
of the same norm along random unit directions u (docs/method.md §2):

    ||g||^2 = d * E_u[(u . g)^2]  ~  (d / m) * sum_j ((gamma(x + h u_j) - gamma(x - h u_j)) / 2h)^2

For a locally linear margin, (d/m) sum_j (u_j . g)^2 / ||g||^2 is (close to) chi^2_m / m, so the
per-sample estimate sqrt(...) is biased low by the factor c_m = E[sqrt(chi^2_m / m)]; we divide it
out. The stated error of the estimate of L^ is 3 standard errors of the per-sample estimates
(the sampling error over images and directions), plus the bias correction's own approximation.

The first-order flip radius gamma / ||grad gamma|| is how far (pixel L2) a sample sits from the
decision boundary of its true class. A misclassified sample (gamma <= 0) has no such distance (its
radius is negative), so the median is taken over the correctly classified samples (gamma > 0) only:
over all samples it would fall with the error rate and turn negative above 50% error.
"""

from __future__ import annotations

import math

import numpy as np

from macs_audit.errors import InputError
from macs_audit.metrics.margins import logit_margin


def chi_mean_factor(m: int) -> float:
    """E[sqrt(chi^2_m / m)] = sqrt(2/m) Gamma((m+1)/2) / Gamma(m/2)."""
    return math.sqrt(2 / m) * math.exp(math.lgamma((m + 1) / 2) - math.lgamma(m / 2))


def autograd_gradient_norms(predictor, images: np.ndarray, labels: np.ndarray):
    """Per-sample (margin, ||grad margin||_2) of one batch for a torch predictor, images float [0,1] NCHW."""
    import torch

    x = torch.from_numpy(images).to(predictor.device).requires_grad_(True)
    y = torch.from_numpy(labels).to(predictor.device)
    gamma = logit_margin(predictor.forward(x, amp=False), y)  # gradients in float32, also on CUDA
    # Samples are independent in eval mode, so the gradient of the sum gives every per-sample gradient.
    (grad,) = torch.autograd.grad(gamma.sum(), x)
    return gamma.detach().cpu().numpy().astype(np.float64), grad.flatten(1).norm(dim=1).cpu().numpy().astype(np.float64)


def finite_difference_gradient_norms(
    predictor, images: np.ndarray, labels: np.ndarray, directions: int, rng: np.random.Generator, step: float = 1e-2
):
    """Per-sample (margin, estimated ||grad margin||_2) of one batch from 2 * `directions` extra forward passes."""
    n = len(images)
    d = int(np.prod(images.shape[1:]))
    gamma = logit_margin(predictor.predict(images), labels)
    sq = np.zeros(n)
    for _ in range(directions):
        u = rng.standard_normal(images.shape).astype(np.float32)
        u /= np.linalg.norm(u.reshape(n, -1), axis=1).reshape(n, 1, 1, 1)
        # No clamping to [0,1]: the gradient is a property of the function at x, not of valid images.
        plus = logit_margin(predictor.predict(images + step * u), labels)
        minus = logit_margin(predictor.predict(images - step * u), labels)
        sq += ((plus - minus) / (2 * step)) ** 2
    return gamma, np.sqrt(d * sq / directions) / chi_mean_factor(directions)


def sensitivity(
    predictor,
    images: np.ndarray,
    labels: np.ndarray,
    directions: int = 8,
    seed: int = 0,
    batch_size: int = 256,
    ctx=None,
) -> dict:
    """L^, its stated error, the method, the subset's mean margin, and the median first-order flip radius
    gamma / ||grad gamma|| over the correctly classified images (how many: `flip_radius_samples`).

    Batches are independent (each draws its directions from a generator seeded by its start), so
    under torch.distributed (`ctx`) each rank computes its own batches and the results are gathered.
    """
    from macs_audit import distributed
    from macs_audit.seeding import derive_seed

    ctx = ctx or distributed.SINGLE
    if len(images) == 0:
        raise InputError("sensitivity needs at least one image")
    exact = predictor.backend == "torch"  # autograd through its differentiable forward
    starts, parts = [], []
    for b, start in enumerate(range(0, len(images), batch_size)):
        if not ctx.owns(b):
            continue
        x, y = images[start : start + batch_size], labels[start : start + batch_size]
        if exact:
            parts.append(autograd_gradient_norms(predictor, x, y))
        else:
            rng = np.random.default_rng(derive_seed("sensitivity", seed, start))
            parts.append(finite_difference_gradient_norms(predictor, x, y, directions, rng))
        starts.append(start)
    parts = distributed.gather_in_order(parts, starts, ctx)
    gamma = np.concatenate([g for g, _ in parts])
    norms = np.concatenate([n for _, n in parts])
    error: float | None
    error_note = None
    if exact:
        method, error = "autograd", 0.0
    else:
        method = f"finite-difference ({directions} random unit directions, central step 1e-2, chi bias corrected)"
        if len(norms) > 1:
            error = 3 * float(norms.std(ddof=1) / math.sqrt(len(norms)))
        else:  # a standard error needs two samples: no stated error rather than an infinite one
            error, error_note = None, "needs at least 2 images"
    correct = gamma > 0  # the flip radius is a distance to the boundary only where the sample is right
    with np.errstate(divide="ignore"):  # a zero gradient: the sample never flips (infinite radius)
        radii = np.where(norms[correct] > 0, gamma[correct] / norms[correct], np.inf)
    radius = float(np.median(radii)) if len(radii) else math.inf
    return {
        "lipschitz": float(norms.mean()),
        "lipschitz_error": error,
        "method": method,
        "n": int(len(norms)),
        "mean_margin_subset": float(gamma.mean()),
        # None: no correctly classified image, or a flat (constant) model whose radii are infinite
        "median_flip_radius": radius if math.isfinite(radius) else None,
        "flip_radius_samples": int(correct.sum()),
        "units": "margin (logit) per unit L2 norm in [0,1] pixel space",
        **({"lipschitz_error_note": error_note} if error_note else {}),
    }
