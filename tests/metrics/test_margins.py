"""The one logit margin: numpy and torch agree, by hand on small cases, and its gradient is the margin's."""

import numpy as np
import torch

from macs_audit.metrics.margins import logit_margin


def test_margin_by_hand():
    z = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0], [1.0, 1.0, 1.0]])
    y = np.array([0, 2, 1])
    np.testing.assert_array_equal(logit_margin(z, y), [1.0, -1.0, 0.0])


def test_numpy_and_torch_agree():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(64, 10)).astype(np.float32)
    y = rng.integers(0, 10, size=64)
    by_numpy = logit_margin(z, y)
    by_torch = logit_margin(torch.from_numpy(z).double(), torch.from_numpy(y))
    assert by_numpy.dtype == np.float64
    np.testing.assert_array_equal(by_numpy, by_torch.numpy())


def test_gradient_reaches_the_true_and_the_runner_up_logit():
    z = torch.tensor([[3.0, 1.0, 2.0]], requires_grad=True)
    logit_margin(z, torch.tensor([0]))[0].backward()
    torch.testing.assert_close(z.grad, torch.tensor([[1.0, 0.0, -1.0]]))
