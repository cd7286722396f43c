"""The corruption API and table: names, families, parameter sets, the torch-free table, input
checks, determinism, batch seeds, matmul precision, and severity ordering."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from corruption_helpers import DETERMINISTIC, MONOTONE, sample_images

from macs_audit.errors import InputError, UsageError
from macs_audit.views.corruptions.apply import OPS, batch_seed, corrupt
from macs_audit.views.corruptions.table import (
    BENCHMARK_CORRUPTIONS,
    CIFAR,
    CORRUPTIONS,
    EXTRA_CORRUPTIONS,
    FAMILIES,
    PARAMETER_SETS,
    SEVERITIES,
)


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------
def test_tables():
    assert len(CORRUPTIONS) == 19 and len(set(CORRUPTIONS)) == 19
    assert CORRUPTIONS[:3] == ("gaussian_noise", "shot_noise", "impulse_noise")
    assert CORRUPTIONS[-4:] == EXTRA_CORRUPTIONS == ("speckle_noise", "gaussian_blur", "spatter", "saturate")
    assert len(BENCHMARK_CORRUPTIONS) == 15
    assert set(BENCHMARK_CORRUPTIONS) | set(EXTRA_CORRUPTIONS) == set(CORRUPTIONS)
    families = {}
    for name in BENCHMARK_CORRUPTIONS:
        families.setdefault(FAMILIES[name], []).append(name)
    assert families == {
        "noise": ["gaussian_noise", "shot_noise", "impulse_noise"],
        "blur": ["defocus_blur", "glass_blur", "motion_blur", "zoom_blur"],
        "weather": ["snow", "frost", "fog", "brightness"],
        "digital": ["contrast", "elastic_transform", "pixelate", "jpeg_compression"],
    }
    assert [FAMILIES[n] for n in EXTRA_CORRUPTIONS] == ["noise", "blur", "weather", "digital"]
    assert SEVERITIES == (1, 2, 3, 4, 5)


@pytest.mark.parametrize("name", sorted(PARAMETER_SETS))
def test_parameter_sets_are_complete(name):
    parameter_set = PARAMETER_SETS[name]
    assert parameter_set.name == name
    assert tuple(parameter_set.parameters) == CORRUPTIONS  # every corruption, in the reference order
    assert all(len(parameter_set.parameters[n]) == len(SEVERITIES) for n in CORRUPTIONS)
    assert 0 < parameter_set.frost_scale <= 1 and len(parameter_set.frost_sizes) == 5
    assert PARAMETER_SETS["cifar"] is CIFAR


def test_every_corruption_has_one_op():
    assert tuple(OPS) == CORRUPTIONS


def test_table_does_not_import_torch():
    # the gate, the data readers and option parsing read names from the table: it must stay light
    code = (
        "import sys, macs_audit.views.corruptions.table; "
        "assert 'torch' not in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------
# API
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", CORRUPTIONS)
def test_shape_dtype_determinism(name):
    x = sample_images(4, seed=1)
    outs = [corrupt(x, name, s, seed=7) for s in range(1, 6)]
    for out in outs:
        assert out.shape == x.shape and out.dtype == torch.uint8 and out.device == x.device
        assert out.is_contiguous()
    assert torch.equal(corrupt(x, name, 3, seed=7), outs[2])
    other = corrupt(x, name, 3, seed=8)
    if name in DETERMINISTIC:
        assert torch.equal(other, outs[2])
    else:
        assert not torch.equal(other, outs[2])
    assert torch.equal(x, sample_images(4, seed=1))  # the input is not modified


def test_cpu_chunks_draw_as_batches_of_their_own(monkeypatch):
    """Above 32x32 a CPU batch is corrupted in chunks that draw from the one generator in turn:
    the first chunk's bytes are those of a batch of its own, and the whole is deterministic."""
    from macs_audit.views.corruptions import apply

    monkeypatch.setattr(apply, "_CPU_CHUNK_PIXELS", 2 * 40 * 40)  # chunks of 2 images
    x = torch.from_numpy(np.random.default_rng(3).integers(0, 256, (5, 40, 40, 3), dtype=np.uint8))
    for name in CORRUPTIONS:
        whole = corrupt(x, name, 3, seed=11, corruption_set="tiny-imagenet")
        assert whole.is_contiguous() and torch.equal(whole, corrupt(x, name, 3, 11, corruption_set="tiny-imagenet"))
        assert torch.equal(whole[:2], corrupt(x[:2], name, 3, 11, corruption_set="tiny-imagenet")), name
        if name in DETERMINISTIC:  # nothing random: chunks or not, the same bytes
            monkeypatch.setattr(apply, "_CPU_CHUNK_PIXELS", 10**9)
            assert torch.equal(whole, corrupt(x, name, 3, 11, corruption_set="tiny-imagenet")), name
            monkeypatch.setattr(apply, "_CPU_CHUNK_PIXELS", 2 * 40 * 40)


@pytest.mark.parametrize("side, corruption_set", [(20, "cifar"), (48, "tiny-imagenet")])
def test_strided_input_gives_the_contiguous_result(side, corruption_set):
    base = torch.from_numpy(np.random.default_rng(4).integers(0, 256, (2, side, side, 3), dtype=np.uint8))
    strided = base.transpose(1, 2)  # a view: rows and columns swapped
    for name in CORRUPTIONS:
        ours = corrupt(strided, name, 3, seed=5, corruption_set=corruption_set)
        assert torch.equal(ours, corrupt(strided.contiguous(), name, 3, seed=5, corruption_set=corruption_set)), name


def test_non_square_and_odd_sizes():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.integers(0, 256, (2, 24, 40, 3), dtype=np.uint8))
    for name in CORRUPTIONS:
        assert corrupt(x, name, 5, seed=1).shape == x.shape, name
    assert corrupt(x[:0], "fog", 1, seed=0).shape == (0, 24, 40, 3)


def test_errors():
    x = sample_images(1)
    with pytest.raises(UsageError, match="unknown corruption"):
        corrupt(x, "gaussian", 1, seed=0)
    for bad in (0, 6, 2.0, True, "3"):
        with pytest.raises(UsageError, match="severity"):
            corrupt(x, "fog", bad, seed=0)
    with pytest.raises(InputError, match="uint8"):
        corrupt(x.float(), "fog", 1, seed=0)
    with pytest.raises(InputError, match="uint8"):
        corrupt(x[..., :1], "fog", 1, seed=0)
    with pytest.raises(InputError, match="uint8"):
        corrupt(x.numpy(), "fog", 1, seed=0)
    with pytest.raises(InputError) as info:
        corrupt(x[0], "fog", 1, seed=0)
    assert "\n" not in str(info.value)


# torch's two ways to lower float32 matmul precision; the per-backend one exists from torch 2.9
PRECISION_APIS = ["legacy"] + (["per-backend"] if hasattr(torch.backends.mkldnn.matmul, "fp32_precision") else [])


@pytest.mark.parametrize("api", PRECISION_APIS)
def test_reduced_matmul_precision_changes_nothing(api):
    """A user's reduced float32 matmul precision (bf16 on CPUs that have it) must not change the
    corruptions, and is restored afterwards."""
    x = sample_images(4, seed=9)
    names = ("snow", "gaussian_blur", "zoom_blur", "elastic_transform", "jpeg_compression", "contrast")
    expected = {n: corrupt(x, n, 3, seed=5) for n in names}
    matmul = torch.backends.mkldnn.matmul
    try:
        if api == "legacy":
            torch.set_float32_matmul_precision("medium")
        else:
            matmul.fp32_precision = "bf16"
        for n in names:
            assert torch.equal(corrupt(x, n, 3, seed=5), expected[n]), n
        if api == "legacy":
            assert torch.get_float32_matmul_precision() == "medium"
        else:
            assert matmul.fp32_precision == "bf16"
    finally:
        if api == "legacy":
            torch.set_float32_matmul_precision("highest")
        else:
            matmul.fp32_precision = "none"
    assert torch.get_float32_matmul_precision() == "highest"


def test_batch_seed():
    s = batch_seed(0, "fog", 3, 1000)
    assert s == batch_seed(0, "fog", 3, 1000)
    assert 0 <= s < 2**63
    others = {
        batch_seed(1, "fog", 3, 1000),
        batch_seed(0, "snow", 3, 1000),
        batch_seed(0, "fog", 4, 1000),
        batch_seed(0, "fog", 3, 2000),
    }
    assert s not in others and len(others) == 4
    assert batch_seed(0, "fog", 3, 0) == 7_280_092_846_327_443_954  # stable across runs


def test_the_two_seed_rules_are_one_function_with_their_own_numbers():
    """The corruptions' batch seed is derive_seed under their rule; the package's rule gives other numbers for
    the same parts, so neither may stand in for the other without changing seeded bytes."""
    from macs_audit.seeding import CORRUPTION_BATCHES, derive_seed

    assert derive_seed(0, "fog", 3, 0, rule=CORRUPTION_BATCHES) == batch_seed(0, "fog", 3, 0)
    assert derive_seed(0, "fog", 3, 0) != batch_seed(0, "fog", 3, 0)
    assert derive_seed("perturbation", 0, "noise", 0) == 2_731_969_506_781_076_793  # stable across runs


@pytest.mark.gpu
def test_cuda_device():
    x = sample_images(3).cuda()
    for name in CORRUPTIONS:
        out = corrupt(x, name, 3, seed=1)
        assert out.device == x.device and out.shape == x.shape and out.dtype == torch.uint8
        if name in DETERMINISTIC:
            diff = (out.cpu().int() - corrupt(x.cpu(), name, 3, seed=1).int()).abs().max()
            assert diff <= 1, name


# ---------------------------------------------------------------------------------------------
# Severity ordering
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", MONOTONE)
def test_severity_monotone(name):
    x = sample_images(8, seed=2)
    d = [(corrupt(x, name, s, seed=3).float() - x.float()).abs().mean().item() for s in range(1, 6)]
    assert all(b >= a - 0.05 for a, b in zip(d[:-1], d[1:], strict=True)), d
    assert d[4] > d[0]
