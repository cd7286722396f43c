"""The one preprocessing: one resize rule for batches and image files, and normalisation on numpy and torch
(the pixels' rounding rule: tests/test_pixels.py)."""

import numpy as np
import pytest
import torch

from macs_audit.errors import InputError
from macs_audit.models.preprocessing import crop_size, fit_description, fit_image, resize, resize_and_normalize


def test_normalise_numpy_and_torch_agree_and_resize_only_when_needed():
    rng = np.random.default_rng(0)
    x = rng.random((2, 3, 8, 8), dtype=np.float32)
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    by_numpy = resize_and_normalize(x, (8, 8), mean, std)
    by_torch = resize_and_normalize(torch.from_numpy(x), (8, 8), mean, std).numpy()
    np.testing.assert_allclose(by_numpy, by_torch, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_numpy[:, 1], (x[:, 1] - 0.4) / 0.25, atol=1e-6)
    assert resize_and_normalize(x, (16, 12), mean, std).shape == (2, 3, 16, 12)
    assert tuple(resize_and_normalize(torch.from_numpy(x), (4, 4), mean, std).shape) == (2, 3, 4, 4)


def test_channel_mismatch_is_an_input_error():
    x = np.zeros((1, 1, 8, 8), dtype=np.float32)
    for images in (x, torch.from_numpy(x)):
        try:
            resize_and_normalize(images, (8, 8), [0.5, 0.5, 0.5], [0.2, 0.2, 0.2])
        except InputError as exc:
            assert "1 channels" in str(exc)
        else:
            raise AssertionError("expected an InputError")


def test_resize_is_one_rule_for_numpy_torch_float_and_uint8():
    """torch's antialiased bilinear on every path: numpy in numpy out, a uint8 batch resized in uint8 (Pillow's
    rounding: within one grey level of the float resize), the same object where the size already fits."""
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (2, 3, 20, 24), dtype=np.uint8)
    assert resize(images, (20, 24)) is images
    small = resize(images, (8, 10))
    assert isinstance(small, np.ndarray) and small.dtype == np.uint8 and small.shape == (2, 3, 8, 10)
    by_float = resize(images.astype(np.float32), (8, 10))
    assert np.abs(small - by_float).max() <= 1
    on_tensor = resize(torch.from_numpy(images), (8, 10))
    assert torch.is_tensor(on_tensor) and np.array_equal(on_tensor.numpy(), small)


def test_fit_image_resizes_whole_or_shorter_side_and_centre_crop():
    from PIL import Image

    rng = np.random.default_rng(2)
    tall = rng.integers(0, 256, (50, 30, 3), dtype=np.uint8)
    whole = fit_image(tall, (16, 16))
    assert whole.shape == (16, 16, 3) and whole.dtype == np.uint8
    by_pil = np.asarray(Image.fromarray(tall).resize((16, 16), Image.Resampling.BILINEAR))
    assert np.abs(whole.astype(np.int16) - by_pil).max() <= 1
    assert np.array_equal(fit_image(tall, (50, 30)), tall)
    # crop_pct 0.5: shorter side 16 / 0.5 = 32, so 30x50 -> 32x53 (bicubic), then the centre 16x16
    cropped = fit_image(tall, (16, 16), crop_pct=0.5)
    scaled = resize(tall.transpose(2, 0, 1)[None], (53, 32), "bicubic")[0].transpose(1, 2, 0)
    assert cropped.shape == (16, 16, 3) and np.array_equal(cropped, scaled[18:34, 8:24])
    # an image of one colour stays that colour through either path
    grey = np.full((40, 60, 3), 77, np.uint8)
    assert (fit_image(grey, (24, 24)) == 77).all() and (fit_image(grey, (24, 24), 0.875) == 77).all()


def test_the_report_says_how_images_were_fitted():
    assert crop_size((224, 224), 0.875) == 256
    assert fit_description((224, 224), None) == "resized to 224x224 (bilinear, aspect not kept)"
    assert fit_description((224, 224), 0.875) == (
        "shorter side resized to 256 (bicubic), centre crop 224x224 (crop_pct 0.875)"
    )


def test_every_interpolation_is_the_one_rule_on_arrays_and_image_folders():
    """The interpolation key: nearest as Pillow's nearest (torch's nearest-exact), the -no-antialias forms as
    torch resizes tensors by default; a uint8 image (fit_image) and a float batch (resize_and_normalize) take
    the same interpolation."""
    import skimage.data
    import torch.nn.functional as F
    from PIL import Image

    from macs_audit.models.preprocessing import INTERPOLATIONS, fit_image, resize, resize_and_normalize

    image = skimage.data.chelsea()  # a photograph, 300x451
    nearest = fit_image(image, (64, 96), interpolation="nearest")
    np.testing.assert_array_equal(nearest, np.asarray(Image.fromarray(image).resize((96, 64), Image.NEAREST)))
    batch = image.transpose(2, 0, 1)[None].astype(np.float32) / 255
    for name in INTERPOLATIONS:
        as_image = fit_image(image, (64, 96), interpolation=name).transpose(2, 0, 1).astype(np.float32) / 255
        as_batch = resize_and_normalize(batch, (64, 96), [0, 0, 0], [1, 1, 1], name)[0].clip(0, 1)
        # the same resize, uint8's rounding after each pass apart: within a grey level almost everywhere
        levels = np.abs(as_image - as_batch) * 255
        assert levels.max() < 2 and (levels > 1.01).mean() < 0.002, name
    plain = F.interpolate(torch.from_numpy(batch), size=(64, 96), mode="bicubic", align_corners=False).numpy()
    np.testing.assert_allclose(resize(batch, (64, 96), "bicubic-no-antialias"), plain, atol=1e-6)
    assert not np.allclose(resize(batch, (64, 96), "bicubic"), plain, atol=1e-3)  # antialiasing differs
    with pytest.raises(ValueError, match="interpolation must be one of"):
        resize(batch, (64, 96), "lanczos")


def test_the_pipeline_says_where_each_value_came_from():
    from macs_audit.models.preprocessing import fit_description

    sources = {"input_size": "config.json", "crop_pct": "flag"}
    assert fit_description((224, 224), 0.9, "bilinear", sources) == (
        "shorter side resized to 248 (bilinear from default), centre crop 224x224 from config.json "
        "(crop_pct 0.9 from flag)"
    )
