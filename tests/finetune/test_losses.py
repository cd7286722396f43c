"""The MaCS loss against a hand-computed case, gradients by flag, and each baseline against its textbook form."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from macs_audit.finetune import losses
from macs_audit.finetune.options import FinetuneOptions
from macs_audit.metrics.margins import logit_margin

CLEAN = [[2.0, 1.0, 0.0], [0.5, 1.5, 0.0]]
PERT = [[1.0, 1.0, 0.5], [0.0, 1.0, 1.0]]
LABELS = [0, 0]


def softmax_list(z):
    e = [math.exp(v) for v in z]
    return [v / sum(e) for v in e]


def kl(p, q):
    return sum(pi * math.log(pi / qi) for pi, qi in zip(p, q, strict=True))


def tensors(requires_grad=True):
    z = torch.tensor(CLEAN, requires_grad=requires_grad)
    zp = torch.tensor(PERT, requires_grad=requires_grad)
    return z, zp, torch.tensor(LABELS)


def test_macs_loss_matches_hand_computation():
    # Margins: 2 - 1 = 1 and 0.5 - 1.5 = -1. Delta = 1: hinge^2 = 0 and (1 - (-1))^2 = 4, mean 2.
    ce = (-math.log(softmax_list(CLEAN[0])[0]) - math.log(softmax_list(CLEAN[1])[0])) / 2
    margin = (0.0 + 4.0) / 2
    consistency = (
        kl(softmax_list(CLEAN[0]), softmax_list(PERT[0])) + kl(softmax_list(CLEAN[1]), softmax_list(PERT[1]))
    ) / 2
    z, zp, y = tensors()
    t = losses.macs_loss(z, zp, y, FinetuneOptions(delta=1.0, lambda_m=0.1, lambda_c=1.0))
    assert t.ce.item() == pytest.approx(ce, rel=1e-6)
    assert t.margin.item() == pytest.approx(margin, rel=1e-6)
    assert t.consistency.item() == pytest.approx(consistency, rel=1e-5)
    assert t.total.item() == pytest.approx(ce + 0.1 * margin + 1.0 * consistency, rel=1e-6)
    # The other KL direction is KL(p~ || p).
    t2 = losses.macs_loss(z, zp, y, FinetuneOptions(kl_direction="pert||clean"))
    reverse = (
        kl(softmax_list(PERT[0]), softmax_list(CLEAN[0])) + kl(softmax_list(PERT[1]), softmax_list(CLEAN[1]))
    ) / 2
    assert t2.consistency.item() == pytest.approx(reverse, rel=1e-5)
    # Delta 3: both samples are below the target: ((3-1)^2 + (3+1)^2) / 2 = 10.
    assert losses.macs_loss(z, zp, y, FinetuneOptions(delta=3.0)).margin.item() == pytest.approx(10.0)
    # CE on both views: the mean of the clean and the perturbed cross-entropy.
    ce_pert = (-math.log(softmax_list(PERT[0])[0]) - math.log(softmax_list(PERT[1])[0])) / 2
    both = losses.macs_loss(z, zp, y, FinetuneOptions(lambda_m=0.1, lambda_c=1.0, ce_on_perturbed=True))
    assert both.ce.item() == pytest.approx((ce + ce_pert) / 2, rel=1e-6)
    assert both.total.item() == pytest.approx((ce + ce_pert) / 2 + 0.1 * margin + consistency, rel=1e-6)


def test_margin_gradient_is_hand_computed():
    z, zp, y = tensors()
    losses.macs_loss(z, zp, y, FinetuneOptions(delta=1.0, lambda_m=1.0, lambda_c=0.0)).total.backward()
    ce_grad = (torch.softmax(torch.tensor(CLEAN), 1) - F.one_hot(y, 3)) / 2
    # Sample 1: d/dz of (1 - (z_0 - z_1))^2 / 2 = -(1 - gamma) at the label, +(1 - gamma) at the runner-up.
    margin_grad = torch.tensor([[0.0, 0.0, 0.0], [-2.0, 2.0, 0.0]])
    torch.testing.assert_close(z.grad, ce_grad + margin_grad)
    assert zp.grad is None or torch.count_nonzero(zp.grad) == 0  # lambda_c = 0: nothing reaches T(x)


@pytest.mark.parametrize("stop_grad", ["clean", "pert", "none"])
def test_consistency_gradients_flow_where_the_flag_says(stop_grad):
    z, zp, y = tensors()
    losses.macs_loss(z, zp, y, FinetuneOptions(lambda_m=0.0, lambda_c=1.0, stop_grad=stop_grad)).total.backward()
    p, q = torch.softmax(torch.tensor(CLEAN), 1), torch.softmax(torch.tensor(PERT), 1)
    ce_grad = (p - F.one_hot(y, 3)) / 2
    # d KL(p || q) / d z~ = (q - p) / N
    if stop_grad == "pert":
        assert zp.grad is None  # the perturbed view is not in the graph at all
    else:
        torch.testing.assert_close(zp.grad, (q - p) / 2)
    if stop_grad == "clean":
        torch.testing.assert_close(z.grad, ce_grad)  # only CE reaches the clean logits
    else:
        assert not torch.allclose(z.grad, ce_grad)


def test_losses_are_float32_under_autocast():
    z = torch.tensor(CLEAN).bfloat16()
    zp = torch.tensor(PERT).bfloat16()
    y = torch.tensor(LABELS)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        t = losses.macs_loss(z, zp, y)
        focal = losses.focal_loss(z, y)
    assert t.total.dtype == torch.float32 and focal.dtype == torch.float32
    ref = losses.macs_loss(z.float(), zp.float(), y)
    assert t.total.item() == ref.total.item()


def random_case(seed=0, n=16, k=5):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) * 3, torch.randint(0, k, (n,), generator=g)


def test_cross_entropy_textbook():
    z, y = random_case()
    log_p = z.double() - torch.logsumexp(z.double(), 1, keepdim=True)
    assert losses.cross_entropy(z, y).item() == pytest.approx(-log_p[torch.arange(16), y].mean().item(), rel=1e-6)


def test_focal_loss_textbook():
    z, y = random_case(1)
    p = np.exp(z.double().numpy()) / np.exp(z.double().numpy()).sum(1, keepdims=True)
    pt = p[np.arange(16), y.numpy()]
    for gamma in (0.0, 1.0, 3.0):
        expected = float(np.mean(-((1 - pt) ** gamma) * np.log(pt)))
        assert losses.focal_loss(z, y, gamma).item() == pytest.approx(expected, rel=1e-5)


def test_label_smoothing_textbook():
    z, y = random_case(2)
    eps, k = 0.1, 5
    q = (1 - eps) * F.one_hot(y, k).double() + eps / k
    expected = -(q * torch.log_softmax(z.double(), 1)).sum(1).mean().item()
    assert losses.label_smoothing_loss(z, y, eps).item() == pytest.approx(expected, rel=1e-6)
    assert losses.label_smoothing_loss(z, y, eps).item() == pytest.approx(
        F.cross_entropy(z, y, label_smoothing=eps).item(), rel=1e-6
    )


def test_mixup_textbook():
    x = torch.rand(8, 3, 4, 4)
    y = torch.arange(8) % 4
    mixed, y_a, y_b, lam = losses.mixup_batch(x, y, 0.4, torch.Generator().manual_seed(0))
    again = losses.mixup_batch(x, y, 0.4, torch.Generator().manual_seed(0))
    assert 0 <= lam <= 1 and lam == again[3] and torch.equal(mixed, again[0])
    # Each mixed image is lam x_i + (1 - lam) x_j with y_b = y_j.
    perm = [
        int(torch.nonzero((y_b[i] == y) & torch.isclose(mixed[i], lam * x[i] + (1 - lam) * x).flatten(1).all(1))[0])
        for i in range(8)
    ]
    assert torch.equal(y_b, y[perm])
    # The mixup loss is cross-entropy against the mixed one-hot target.
    z, _ = random_case(3, n=8, k=4)
    target = lam * F.one_hot(y_a, 4).double() + (1 - lam) * F.one_hot(y_b, 4).double()
    expected = -(target * torch.log_softmax(z.double(), 1)).sum(1).mean().item()
    assert losses.mixup_loss(z, y_a, y_b, lam).item() == pytest.approx(expected, rel=1e-6)


def test_margin_definition():
    z = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 1.0]])
    torch.testing.assert_close(logit_margin(z, torch.tensor([0, 0])), torch.tensor([1.0, -5.0]))


def test_every_objective_has_its_loss():
    """The torch-free names --help lists and the loss table the loop calls agree (MaCS is the loop's own)."""
    from macs_audit.finetune.options import OBJECTIVES

    assert set(OBJECTIVES) == {"macs", *losses.OBJECTIVE_LOSSES}
