"""Noise corruptions and their random words: statistics, and the table samplers' output
distributions against the exact ones of the reference's model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from macs_audit.views.corruptions.apply import corrupt
from macs_audit.views.corruptions.noise import impulse_noise
from macs_audit.views.corruptions.randomness import RandomWords
from macs_audit.views.corruptions.table import CIFAR


def test_gaussian_noise_statistics():
    x = torch.full((20, 32, 32, 3), 128, dtype=torch.uint8)
    for s, sigma in enumerate(CIFAR.parameters["gaussian_noise"], start=1):
        diff = corrupt(x, "gaussian_noise", s, seed=0).double() - 128
        # floor(128 + 255 n) - 128 has mean -0.5 and std ~ 255 sigma
        assert abs(diff.mean().item() + 0.5) < 0.3
        assert abs(diff.std().item() / (255 * sigma) - 1) < 0.03


def test_impulse_noise_statistics():
    x = torch.full((20, 32, 32, 3), 100, dtype=torch.uint8)
    out = corrupt(x, "impulse_noise", 5, seed=0)
    salt = (out == 255).double().mean().item()
    pepper = (out == 0).double().mean().item()
    assert abs(salt - 0.035) < 0.005 and abs(pepper - 0.035) < 0.005
    assert ((out == 0) | (out == 100) | (out == 255)).all()


def test_impulse_noise_extreme_amounts():
    """amount 0 keeps every value; amount 1 flips every value to 0 or 255 (the threshold of
    2^15 on the signed 16-bit word must not wrap)."""
    x = torch.full((8, 32, 32, 3), 77, dtype=torch.uint8)
    assert torch.equal(impulse_noise(x, 0.0, torch.Generator().manual_seed(0)), x)
    out = impulse_noise(x, 1.0, torch.Generator().manual_seed(0))
    assert set(out.unique().tolist()) == {0, 255}
    assert abs(float((out == 255).float().mean()) - 0.5) < 0.02


def test_shot_noise_statistics():
    x = torch.full((20, 32, 32, 3), 128, dtype=torch.uint8)
    diff = corrupt(x, "shot_noise", 5, seed=0).double() - 128
    lam = 128 / 255 * 50  # Poisson(x c) / c, times 255: std = 255 sqrt(lam) / c
    assert abs(diff.std().item() / (255 * math.sqrt(lam) / 50) - 1) < 0.05


def _normal_cdf(t):
    return 0.5 * (1 + math.erf(t / math.sqrt(2)))


def _output_pmf(name, level, severity):
    """The exact distribution of one output value for a flat input ``level`` (the reference's
    model: x + N(0, s), x Poisson(x c) / c, x + x N(0, s); then clip, x 255, floor)."""
    param = CIFAR.parameters[name][severity - 1]
    pmf = np.zeros(256)
    if name == "shot_noise":
        lam = level / 255 * param
        for count in range(int(lam + 12 * math.sqrt(lam) + 20)):
            p = math.exp(count * math.log(lam) - lam - math.lgamma(count + 1))
            pmf[int(min(count / param, 1.0) * 255)] += p
        return pmf
    scale = 255 * param if name == "gaussian_noise" else level * param
    edges = np.array([_normal_cdf((j - level) / scale) for j in range(1, 256)])
    pmf[0], pmf[255] = edges[0], 1 - edges[-1]
    pmf[1:255] = np.diff(edges)
    return pmf


@pytest.mark.parametrize("name", ["gaussian_noise", "shot_noise", "speckle_noise"])
def test_noise_samplers_draw_the_reference_distribution(name):
    """The quantile-table samplers against the exact distribution of the output grey level:
    total variation within sampling error (about 0.01 for 307,200 draws over ~100 levels)."""
    for level, severity in ((128, 1), (128, 5), (30, 3), (240, 5)):
        x = torch.full((100, 32, 32, 3), level, dtype=torch.uint8)
        out = corrupt(x, name, severity, seed=severity)
        empirical = np.bincount(out.numpy().ravel(), minlength=256) / out.numel()
        tv = 0.5 * np.abs(empirical - _output_pmf(name, level, severity)).sum()
        assert tv < 0.02, (name, level, severity, tv)


def test_random_words_deterministic_per_seed():
    def words(seed):
        return RandomWords(torch.Generator().manual_seed(seed), "cpu").draw(10_001)

    assert torch.equal(words(3), words(3)) and not torch.equal(words(3), words(4))
    w = words(5).numpy().astype(np.int64) + (1 << 15)  # table cells 0..65535
    assert w.dtype == np.int64 and w.min() >= 0 and w.max() < 1 << 16
    assert abs(w.mean() / 65535 - 0.5) < 0.01  # uniform: mean 1/2, sd of the mean ~0.003
