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
