"""Perturbation views: the blur against scipy, seeding, shape and range."""

import numpy as np
import pytest
import torch
from conftest import tiny_images
from scipy.ndimage import gaussian_filter

from macs_audit.errors import UsageError
from macs_audit.views import perturbation_params, perturbations
from macs_audit.views.view import perturbation


def test_blur_matches_scipy_gaussian_filter_per_sample_sigma():
    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    sigmas = [0.3, 0.7, 1.0]
    y = perturbations.gaussian_blur(x, torch.tensor(sigmas))
    for i, s in enumerate(sigmas):
        ref = np.stack([gaussian_filter(x[i, c].double().numpy(), s, mode="nearest", truncate=4.0) for c in range(3)])
        # float32 against float64: two passes of <= 9 taps on [0, 1], under 2 x 9 x 2^-24 = 1.1e-6: 1e-5 leaves 9x
        assert np.abs(ref - y[i].numpy()).max() < 1e-5


def test_views_are_seeded_bounded_and_shaped():
    x = torch.rand(4, 3, 8, 8)
    for name in perturbation_params.EVAL_VIEWS:
        a = perturbations.evaluation_view(name, x, torch.Generator().manual_seed(1))
        b = perturbations.evaluation_view(name, x, torch.Generator().manual_seed(1))
        assert a.shape == x.shape and torch.equal(a, b) and a.min() >= 0 and a.max() <= 1
    noisy = perturbations.gaussian_noise(torch.full((2, 3, 64, 64), 0.5), 0.08, torch.Generator().manual_seed(0))
    assert abs(float((noisy - 0.5).std()) - 0.08) < 0.005
    t = perturbations.training_view(x, torch.Generator().manual_seed(2))
    assert t.shape == x.shape and not torch.equal(t, x)
    with pytest.raises(UsageError):
        perturbations.evaluation_view("fog", x, torch.Generator())


def test_perturbation_view_does_not_depend_on_batch_split():
    images, _ = tiny_images(8)
    view = perturbation("noise+blur", seed=0, device="cpu")
    whole = view(images, 0)
    assert np.array_equal(whole, view(images, 0))
    assert not np.array_equal(whole, perturbation("noise+blur", seed=1, device="cpu")(images, 0))


def test_evaluation_blur_scales_with_the_image_side():
    # 0.7 px at 32x32 (today's CIFAR value, exactly), the same fraction of the image at other sizes
    assert perturbation_params.eval_blur_sigma(32, 32) == 0.7
    assert perturbation_params.eval_blur_sigma(224, 300) == pytest.approx(4.9)
    for side in (32, 224):
        x = torch.rand(2, 3, side, side, generator=torch.Generator().manual_seed(side))
        sigma = 0.7 * side / 32
        assert torch.equal(
            perturbations.evaluation_view("blur", x, torch.Generator()),
            perturbations.gaussian_blur(x, sigma).clamp(0, 1),
        )
        expected = perturbations.noise_and_blur(x, sigma, 0.08, torch.Generator().manual_seed(3))
        assert torch.equal(perturbations.evaluation_view("noise+blur", x, torch.Generator().manual_seed(3)), expected)
    assert "4.9 px" in perturbation_params.describe(224, 224)["noise+blur"]


def test_training_blur_range_scales_with_the_image_side():
    """MaCS's T(x) draws its blur in pixels of a 32 px image: the same draws blur a 64 px image twice as much,
    and a 32 px image exactly as the range says (no noise, so the blur alone is compared)."""
    for side, scale in ((32, 1.0), (64, 2.0)):
        images = torch.rand(4, 3, side, side, generator=torch.Generator().manual_seed(1))
        got = perturbations.training_view(images, torch.Generator().manual_seed(5), (0.3, 0.8), (0.0, 0.0))
        u = torch.rand(2, 4, generator=torch.Generator().manual_seed(5))
        expected = perturbations.gaussian_blur(images, (0.3 + 0.5 * u[0]) * scale).clamp(0, 1)
        assert torch.allclose(got, expected, atol=1e-6)
