"""Mild perturbations: Gaussian noise, Gaussian blur, and blur-then-noise, batched on any device.

Shared by the audit (the robust-accuracy view) and MaCS fine-tuning (the perturbed training view),
so both use exactly the same code. Images are float tensors in [0, 1] pixel space, (N, C, H, W),
before mean/std normalisation. Every random function takes an explicit torch.Generator.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from macs_audit.errors import UsageError
from macs_audit.views.perturbation_params import (
    EVAL_NOISE_SIGMA,
    EVAL_REFERENCE_SIDE,
    EVAL_VIEWS,
    TRAIN_BLUR_RANGE,
    TRAIN_NOISE_RANGE,
    eval_blur_sigma,
)


def _per_sample(value, n: int, like: torch.Tensor) -> torch.Tensor:
    """A scalar or (N,) strength as an (N,) tensor on `like`'s device and dtype."""
    value = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    return value.expand(n) if value.ndim == 0 else value


def gaussian_blur(images: torch.Tensor, sigma) -> torch.Tensor:
    """Separable Gaussian blur with a per-sample sigma (scalar or (N,) tensor); edges replicated,
    kernel radius int(4*max_sigma + 0.5) as scikit-image's gaussian filter. sigma 0 is the identity."""
    n, c, h, w = images.shape
    sigma = _per_sample(sigma, n, images)
    radius = int(4 * float(sigma.max()) + 0.5)
    if radius == 0:
        return images
    offsets = torch.arange(-radius, radius + 1, device=images.device, dtype=images.dtype)
    safe = sigma.clamp_min(1e-6)[:, None]
    kernel = torch.exp(-0.5 * (offsets[None, :] / safe) ** 2)
    kernel = torch.where(sigma[:, None] > 0, kernel, (offsets[None, :] == 0).to(kernel))  # sigma 0: identity
    kernel = kernel / kernel.sum(dim=1, keepdim=True)
    weight = kernel.repeat_interleave(c, dim=0)  # (N*C, k): one kernel per (sample, channel)
    x = images.reshape(1, n * c, h, w)
    x = F.pad(x, (radius, radius, 0, 0), mode="replicate")
    x = F.conv2d(x, weight[:, None, None, :], groups=n * c)
    x = F.pad(x, (0, 0, radius, radius), mode="replicate")
    x = F.conv2d(x, weight[:, None, :, None], groups=n * c)
    return x.reshape(n, c, h, w)


def gaussian_noise(images: torch.Tensor, sigma, generator: torch.Generator) -> torch.Tensor:
    """Add N(0, sigma^2) noise per pixel and channel (per-sample sigma allowed), clamp to [0, 1]."""
    n = images.shape[0]
    sigma = _per_sample(sigma, n, images).view(n, 1, 1, 1)
    noise = torch.randn(images.shape, generator=generator, device=images.device, dtype=images.dtype)
    return (images + sigma * noise).clamp_(0, 1)


def noise_and_blur(images: torch.Tensor, blur_sigma, noise_sigma, generator: torch.Generator) -> torch.Tensor:
    """Gaussian blur, then Gaussian noise (the MaCS paper's best perturbation), clamped to [0, 1]."""
    return gaussian_noise(gaussian_blur(images, blur_sigma), noise_sigma, generator)


def evaluation_view(name: str, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The fixed-strength perturbation views of the audit (the blur scaled with the image size)."""
    blur = eval_blur_sigma(*images.shape[-2:])
    if name == "noise":
        return gaussian_noise(images, EVAL_NOISE_SIGMA, generator)
    if name == "blur":
        return gaussian_blur(images, blur).clamp(0, 1)
    if name == "noise+blur":
        return noise_and_blur(images, blur, EVAL_NOISE_SIGMA, generator)
    raise UsageError(f"unknown perturbation {name!r}; choose from {', '.join(EVAL_VIEWS)}")


def training_view(
    images: torch.Tensor, generator: torch.Generator, blur_range=TRAIN_BLUR_RANGE, noise_range=TRAIN_NOISE_RANGE
) -> torch.Tensor:
    """MaCS's perturbed view T(x): per-sample random blur then random noise strengths. The blur range is in
    pixels of a 32 px image and scales with the images' shorter side (as the evaluation views' blur does):
    exactly the given range at 32x32, twice it at 64x64."""
    n = images.shape[0]
    u = torch.rand(2, n, generator=generator, device=images.device, dtype=images.dtype)
    scale = min(images.shape[-2:]) / EVAL_REFERENCE_SIDE
    blur = (blur_range[0] + (blur_range[1] - blur_range[0]) * u[0]) * scale
    noise = noise_range[0] + (noise_range[1] - noise_range[0]) * u[1]
    return noise_and_blur(images, blur, noise, generator)
