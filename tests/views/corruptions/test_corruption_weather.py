"""Weather corruptions: frost (its textures, procedural and from a user's directory) and fog's
plasma fractal."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from corruption_helpers import sample_images
from PIL import Image

from macs_audit.errors import InputError
from macs_audit.views.corruptions.apply import corrupt
from macs_audit.views.corruptions.table import CIFAR
from macs_audit.views.corruptions.weather import _plasma, frost_texture_info, load_user_frost, procedural_frost


def test_frost_monotone_in_correlation_loss():
    # frost = w_img * x + w_frost * texture: the image-to-frost ratio falls 5 -> 1.67, so the
    # clean signal's share falls; measured as 1 - correlation with the clean image.
    x = sample_images(8, seed=2).float()
    losses = []
    for s in range(1, 6):
        y = corrupt(x.to(torch.uint8), "frost", s, seed=3).float()
        xc = x - x.mean(dim=(1, 2, 3), keepdim=True)
        yc = y - y.mean(dim=(1, 2, 3), keepdim=True)
        corr = (xc * yc).sum((1, 2, 3)) / ((xc * xc).sum((1, 2, 3)) * (yc * yc).sum((1, 2, 3))).sqrt()
        losses.append(1 - corr.mean().item())
    assert all(b >= a for a, b in zip(losses[:-1], losses[1:], strict=True)), losses


def test_fog_plasma_fractal():
    gen = torch.Generator().manual_seed(0)
    maps = _plasma(3, 32, 2.0, gen, "cpu")
    assert maps.shape == (3, 32, 32)
    assert torch.allclose(maps.amin(dim=(1, 2)), torch.zeros(3))
    assert torch.allclose(maps.amax(dim=(1, 2)), torch.ones(3))
    assert not torch.equal(maps[0], maps[1])


def test_procedural_frost_textures():
    a = procedural_frost(0, 120, 180)
    assert a.shape == (120, 180, 3) and a.dtype == np.uint8
    assert np.array_equal(a, procedural_frost.__wrapped__(0, 120, 180))  # deterministic
    assert 90 < a.mean() < 200 and a.std() > 20
    assert not np.array_equal(procedural_frost(1, 63, 112), procedural_frost(2, 63, 112))
    info = frost_texture_info(None)
    assert info.startswith("procedural (seed ") and "180x120" in info and f"{len(CIFAR.frost_sizes)} textures" in info


def test_frost_from_user_directory(tmp_path):
    rng = np.random.default_rng(9)
    for name, size in (("a.png", (260, 300)), ("b.jpg", (200, 240))):
        low = rng.random((6, 6, 3))
        img = np.clip(ndi.zoom(low, (size[0] / 6, size[1] / 6, 1), order=1), 0, 1) * 255
        Image.fromarray(img.astype(np.uint8)).save(tmp_path / name)
    (tmp_path / "notes.txt").write_text("not an image")
    info = frost_texture_info(str(tmp_path))
    assert str(tmp_path) in info and "a.png" in info and "b.jpg" in info
    textures = load_user_frost(str(tmp_path))
    assert [t.shape for t in textures] == [(52, 60, 3), (40, 48, 3)]  # 0.2 resize
    x = sample_images(6, seed=3)
    out = corrupt(x, "frost", 4, seed=1, frost_textures=str(tmp_path)).numpy()
    w_img, w_frost = CIFAR.parameters["frost"][3]
    for i in range(6):  # each output is clip(w_img x + w_frost crop) for some crop
        xi = x[i].numpy().astype(np.float32)
        found = False
        for t in textures:
            for r in range(t.shape[0] - 32):
                for c in range(t.shape[1] - 32):
                    crop = t[r : r + 32, c : c + 32].astype(np.float32)
                    if np.array_equal(np.clip(w_img * xi + w_frost * crop, 0, 255).astype(np.uint8), out[i]):
                        found = True
                        break
                if found:
                    break
            if found:
                break
        assert found, i


def test_frost_user_directory_errors(tmp_path):
    x = sample_images(1)
    with pytest.raises(InputError, match="does not exist"):
        corrupt(x, "frost", 1, seed=0, frost_textures=str(tmp_path / "missing"))
    with pytest.raises(InputError, match="no image files"):
        corrupt(x, "frost", 1, seed=0, frost_textures=str(tmp_path))
    Image.fromarray(np.zeros((100, 100, 3), np.uint8)).save(tmp_path / "small.png")
    with pytest.raises(InputError, match="smaller than"):
        corrupt(x, "frost", 1, seed=0, frost_textures=str(tmp_path))


def test_frost_resize_matches_cv2(tmp_path):
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(4)
    img = rng.integers(0, 256, (315, 560, 3), dtype=np.uint8)
    Image.fromarray(img).save(tmp_path / "frost.png")
    ours = load_user_frost(str(tmp_path))[0]
    ref = cv2.resize(img, (0, 0), fx=0.2, fy=0.2)  # INTER_LINEAR
    assert ours.shape == ref.shape
    assert np.abs(ours.astype(int) - ref.astype(int)).max() <= 1
