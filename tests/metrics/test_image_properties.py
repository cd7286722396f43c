"""Image properties against independent references: numpy's mean and std of a luma computed here, scipy.ndimage's
Laplacian (and OpenCV's where installed), the colourfulness formula transcribed from Hasler & Suesstrunk (2003) on
0-255 pixels, on two real photographs (scikit-learn's sample images) and random images; the torch path against the
numpy one; the taps' data-set order, in one process and under torchrun; sizes from files written with Pillow."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from scipy import ndimage

from macs_audit import distributed
from macs_audit.errors import InputError
from macs_audit.images import open_image
from macs_audit.metrics import image_properties as image_properties_module
from macs_audit.metrics.image_properties import (
    CONVENTIONS,
    PROPERTIES,
    SIZE_PROPERTIES,
    PropertyTaps,
    image_properties,
    original_sizes,
)

KERNEL = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype=np.float64)


def photos(height: int, width: int) -> np.ndarray:
    """scikit-learn's two sample photographs (china, flower), a crop of each downscaled with Pillow to
    height x width: float32 (2, 3, H, W) in [0, 1]."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    out = []
    for photo in load_sample_images().images:
        crop = Image.fromarray(photo[40:400, 100:580])
        out.append(np.asarray(crop.resize((width, height), Image.BICUBIC)))
    return (np.stack(out).astype(np.float32) / 255).transpose(0, 3, 1, 2)


def random_images(n: int, height: int, width: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    """Noise, and noise smoothed to a blur (sharpness far lower): float32 (n, C, H, W) in [0, 1]."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, channels, height, width), dtype=np.float32)
    x[n // 2 :] = ndimage.uniform_filter(x[n // 2 :], size=(1, 1, 5, 5))
    return x


@pytest.fixture(scope="module")
def batch() -> np.ndarray:
    """Photographs and random images, not square (48 x 64: a swapped axis shows)."""
    return np.concatenate([photos(48, 64), random_images(4, 48, 64)])


def luma(image: np.ndarray) -> np.ndarray:
    """BT.601 luma of one (3, H, W) image, in float64, written out."""
    r, g, b = image.astype(np.float64)
    return 0.299 * r + 0.587 * g + 0.114 * b


def hasler_susstrunk(image: np.ndarray) -> float:
    """The paper's M3 on one image's 0-255 (R, G, B) pixels, as published: sigma_rgyb + 0.3 mu_rgyb."""
    r, g, b = image.astype(np.float64) * 255
    rg = r - g
    yb = 0.5 * (r + g) - b
    sigma_rgyb = np.sqrt(np.std(rg) ** 2 + np.std(yb) ** 2)
    mu_rgyb = np.sqrt(np.mean(rg) ** 2 + np.mean(yb) ** 2)
    return float(sigma_rgyb + 0.3 * mu_rgyb)


def test_names_and_conventions():
    assert set(CONVENTIONS) == set(PROPERTIES) | set(SIZE_PROPERTIES)
    assert all(text and "\n" not in text for text in CONVENTIONS.values())


def test_brightness_and_contrast_are_the_mean_and_std_of_the_luma(batch):
    values = image_properties(batch)
    for name in PROPERTIES:
        assert values[name].shape == (len(batch),) and values[name].dtype == np.float64
    np.testing.assert_allclose(values["brightness"], [np.mean(luma(im)) for im in batch], rtol=1e-12)
    np.testing.assert_allclose(values["contrast"], [np.std(luma(im)) for im in batch], rtol=1e-12)


def test_scipy_laplace_is_the_4_neighbour_kernel_with_reflect_101_borders():
    """The reference's own meaning, pinned: a unit impulse gives the kernel, and the borders are numpy's
    'reflect' padding (d c b | a b c d | c b a, the edge pixel not repeated: OpenCV's BORDER_REFLECT_101)."""
    impulse = np.zeros((5, 5))
    impulse[2, 2] = 1
    np.testing.assert_array_equal(ndimage.laplace(impulse, mode="mirror")[1:4, 1:4], KERNEL)
    y = np.random.default_rng(1).random((6, 9))
    padded = np.pad(y, 1, mode="reflect")
    by_hand = sum(KERNEL[i, j] * padded[i : i + 6, j : j + 9] for i in range(3) for j in range(3))
    np.testing.assert_allclose(ndimage.laplace(y, mode="mirror"), by_hand, rtol=0, atol=1e-14)


def test_sharpness_is_scipys_variance_of_the_laplacian(batch):
    values = image_properties(batch)
    expected = [ndimage.laplace(luma(im), mode="mirror").var() for im in batch]
    np.testing.assert_allclose(values["sharpness"], expected, rtol=1e-12)
    assert values["sharpness"][2:4].min() > 10 * values["sharpness"][4:].max()  # noise is sharper than its blur


def test_sharpness_is_opencvs_variance_of_the_laplacian(batch):
    cv2 = pytest.importorskip("cv2")
    expected = [cv2.Laplacian(luma(im), cv2.CV_64F).var() for im in batch]
    np.testing.assert_allclose(image_properties(batch)["sharpness"], expected, rtol=1e-12)


def test_colourfulness_is_hasler_and_susstrunks_m3_on_the_0_1_scale(batch):
    values = image_properties(batch)["colourfulness"]
    np.testing.assert_allclose(values * 255, [hasler_susstrunk(im) for im in batch], rtol=1e-12)
    assert values[1] > values[0] > 0  # the flower photograph is the more colourful of the two


def test_grey_images_have_no_colour_and_one_channel_is_its_own_luma(batch):
    grey = batch[:, :1]
    one = image_properties(grey)
    three = image_properties(np.repeat(grey, 3, axis=1))
    np.testing.assert_array_equal(one["colourfulness"], 0)
    np.testing.assert_array_equal(three["colourfulness"], 0)
    for name in ("brightness", "contrast", "sharpness"):
        np.testing.assert_allclose(three[name], one[name], rtol=1e-12)
    np.testing.assert_allclose(one["brightness"], grey.astype(np.float64).mean(axis=(1, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(
        one["sharpness"], [ndimage.laplace(im[0].astype(np.float64), mode="mirror").var() for im in grey], rtol=1e-12
    )


def test_a_uniform_image_has_no_contrast_and_no_sharpness():
    values = image_properties(np.full((2, 3, 16, 24), 0.3, dtype=np.float32))
    np.testing.assert_allclose(values["brightness"], 0.3, rtol=1e-6)
    np.testing.assert_allclose(values["contrast"], 0, atol=1e-12)
    np.testing.assert_array_equal(values["sharpness"], 0)


def test_darkening_scales_each_property_by_its_power(batch):
    """x -> 0.4 x scales the luma, hence brightness and contrast, by 0.4; the Laplacian's variance by 0.16; M3
    (standard deviations and means of linear maps) by 0.4. In float64, so that the pixels are scaled exactly."""
    x = batch.astype(np.float64)
    bright, dark = image_properties(x), image_properties(0.4 * x)
    for name, factor in (("brightness", 0.4), ("contrast", 0.4), ("sharpness", 0.16), ("colourfulness", 0.4)):
        np.testing.assert_allclose(dark[name], factor * bright[name], rtol=1e-12, err_msg=name)


def test_images_of_one_row_or_column():
    """A single pixel along an axis has no second difference along it (reflected, its neighbours are itself)."""
    x = random_images(3, 1, 9)
    expected = [ndimage.laplace(luma(im), mode="mirror").var() for im in x]
    np.testing.assert_allclose(image_properties(x)["sharpness"], expected, rtol=1e-12)
    x = random_images(3, 7, 1, seed=2)
    expected = [ndimage.laplace(luma(im), mode="mirror").var() for im in x]
    np.testing.assert_allclose(image_properties(x)["sharpness"], expected, rtol=1e-12)


def test_chunks_give_the_whole_batchs_values(batch, monkeypatch):
    """The CPU computes a batch by cache-sized chunks of images: chunks of 2 (the last of 6 images split 2, 2, 2)
    and of 4 (4, 2) give each image the values it has alone."""
    torch = pytest.importorskip("torch")
    alone = [image_properties(batch[i : i + 1]) for i in range(len(batch))]
    for images in (2, 4):
        monkeypatch.setattr(image_properties_module, "CHUNK_PIXELS", images * 48 * 64)
        for values in (image_properties(batch), image_properties(torch.from_numpy(batch))):
            for name in PROPERTIES:
                np.testing.assert_allclose(values[name], [a[name][0] for a in alone], rtol=1e-12, err_msg=name)


def test_images_not_shaped_nchw_with_1_or_3_channels_are_refused():
    for shape in ((2, 4, 8, 8), (3, 8, 8), (2, 8, 8, 3)):
        with pytest.raises(InputError, match=r"\(N, C, H, W\)"):
            image_properties(np.zeros(shape, dtype=np.float32))


def test_an_empty_batch_has_empty_properties():
    values = image_properties(np.zeros((0, 3, 8, 8), dtype=np.float32))
    assert all(values[name].shape == (0,) for name in PROPERTIES)


def test_torch_tensors_give_the_numpy_values(batch):
    torch = pytest.importorskip("torch")
    for x in (batch, batch[:, :1]):
        expected = image_properties(x)
        values = image_properties(torch.from_numpy(x))
        for name in PROPERTIES:
            assert values[name].dtype == np.float64
            np.testing.assert_allclose(values[name], expected[name], rtol=1e-12, atol=1e-15, err_msg=name)
    tracked = torch.from_numpy(batch).requires_grad_(True)  # a tensor in a graph: values, no graph built
    np.testing.assert_allclose(image_properties(tracked)["sharpness"], image_properties(batch)["sharpness"])


@pytest.mark.gpu
def test_cuda_tensors_give_the_numpy_values(batch):
    import torch

    expected = image_properties(batch)
    values = image_properties(torch.from_numpy(batch).cuda())
    for name in PROPERTIES:
        np.testing.assert_allclose(values[name], expected[name], rtol=1e-10, atol=1e-15, err_msg=name)


@pytest.mark.slow
def test_numpy_input_does_not_import_torch():
    script = (
        "import sys, numpy as np\nfrom macs_audit.metrics.image_properties import image_properties\n"
        "image_properties(np.zeros((1, 3, 4, 4), np.float32))\nsys.exit(int('torch' in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", script], timeout=120).returncode == 0


def test_taps_put_the_batches_in_data_set_order(batch):
    """Batches observed out of order (as sharded ranks or a loop may see them) come back ordered by their
    starts; finish starts the next pass afresh."""
    taps = PropertyTaps()
    x = np.concatenate([batch, batch[::-1]])  # 12 images, batches of 5, 5, 2
    for start in (5, 10, 0):
        taps.observe(start, x[start : start + 5])
    values = taps.finish(distributed.SINGLE)
    expected = image_properties(x)
    for name in PROPERTIES:
        assert values[name].shape == (12,) and values[name].dtype == np.float64
        np.testing.assert_allclose(values[name], expected[name], rtol=1e-12)
    empty = taps.finish(distributed.SINGLE)
    assert all(empty[name].shape == (0,) for name in PROPERTIES)


# Run under torchrun: each rank observes the batches it owns (batch b on rank b % 2), last batch first.
SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from macs_audit import distributed
    from macs_audit.metrics.image_properties import PROPERTIES, PropertyTaps

    ctx = distributed.init_from_env("cpu")
    x = np.random.default_rng(0).random((23, 3, 12, 10), dtype=np.float32)
    taps = PropertyTaps()
    for b, start in reversed(list(enumerate(range(0, len(x), 4)))):
        if ctx.owns(b):
            taps.observe(start, x[start : start + 4])
    values = taps.finish(ctx)
    if ctx.is_main:
        np.savez(sys.argv[1], x=x, **values)
    distributed.shutdown(ctx)
""")


@pytest.mark.slow
def test_taps_gather_every_rank_in_data_set_order(tmp_path):
    from torchrun import torchrun

    (tmp_path / "taps.py").write_text(SCRIPT)
    run = torchrun([str(tmp_path / "taps.py"), str(tmp_path / "out.npz")], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    expected = image_properties(out["x"])
    for name in PROPERTIES:
        np.testing.assert_allclose(out[name], expected[name], rtol=1e-12, err_msg=name)


def test_original_sizes_read_the_headers(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    files, shapes = [], [(20, 30, "png"), (41, 17, "jpg"), (64, 64, "png"), (9, 100, "jpeg"), (33, 12, "gif")]
    for i, (h, w, suffix) in enumerate(shapes):
        path = tmp_path / f"{i}.{suffix}"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
        files.append(path)
    grey = tmp_path / "grey.png"
    Image.fromarray(rng.integers(0, 256, (15, 40), dtype=np.uint8)).save(grey)
    files.append(str(grey))  # paths as strings too
    shapes.append((15, 40, "png"))
    heights = np.array([h for h, _, _ in shapes], dtype=np.float64)
    widths = np.array([w for _, w, _ in shapes], dtype=np.float64)
    for threads in (1, 4):
        sizes = original_sizes(files, threads=threads)
        assert set(sizes) == set(SIZE_PROPERTIES)
        np.testing.assert_array_equal(sizes["original_pixels"], widths * heights)
        np.testing.assert_allclose(sizes["aspect_ratio"], widths / heights, rtol=1e-15)
    assert all(len(v) == 0 for v in original_sizes([]).values())


def test_original_sizes_are_the_stored_size_the_audit_scores(tmp_path):
    """A JPEG stored 40 wide and 20 high, tagged to be displayed rotated (EXIF orientation 6, 90 degrees): the
    audit scores the stored pixels (open_image does not rotate), and the size is the stored one."""
    from PIL import Image, ImageOps

    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.new("RGB", (40, 20), (200, 100, 50)).save(path, exif=exif)
    with Image.open(path) as im:
        assert im.getexif().get(0x0112) == 6
        assert ImageOps.exif_transpose(im).size == (20, 40)  # displayed: the tag was written and means a turn
    assert open_image(path).size == (40, 20)
    sizes = original_sizes([path])
    assert sizes["original_pixels"].tolist() == [800.0] and sizes["aspect_ratio"].tolist() == [2.0]


def test_an_unreadable_file_is_refused_by_name(tmp_path):
    from PIL import Image

    good = tmp_path / "good.png"
    Image.new("RGB", (8, 8)).save(good)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image at all")
    for files in ([good, bad], [tmp_path / "missing.jpg"]):
        with pytest.raises(InputError) as caught:
            original_sizes(files)
        message = str(caught.value)
        assert str(files[-1]) in message and "\n" not in message
