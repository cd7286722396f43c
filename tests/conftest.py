"""Shared fixtures: tiny data sets and tiny models built in the test, never downloaded."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Under pytest-xdist each worker takes its share of the cores: torch, onnxruntime, OpenBLAS and the bootstrap's
# threads all follow OMP_NUM_THREADS here, and workers whose thread pools each take every core spin against each
# other (a torch training fixture ran 7x slower). Set before numpy and torch load; the processes a test starts
# inherit it.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

from pathlib import Path

import numpy as np
import pytest


def exact_codec_build() -> str | None:
    """Why the `exact_codec` tests cannot hold with this Pillow, or None: they compare bit for bit with upstream
    Pillow's libjpeg-turbo codec and fixed-point resize (IJG libjpeg and Pillow-SIMD, a `.post` version, round
    differently by design; the within-1-grey-level checks still run there)."""
    import PIL
    from PIL import features

    if not features.check("libjpeg_turbo"):
        return f"Pillow {PIL.__version__} decodes JPEG with libjpeg {features.version('jpg')}, not libjpeg-turbo"
    if ".post" in PIL.__version__:
        return f"Pillow {PIL.__version__} is a fork (Pillow-SIMD) whose resize rounds differently"
    return None


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` skip cleanly where no CUDA device is present (torch is imported only then);
    tests marked `exact_codec` skip where Pillow's build cannot give the bytes they pin (`exact_codec_build`).
    Under pytest-xdist the files holding a `slow` test go first: each worker takes whole files in this order
    (--dist loadfile --no-loadscope-reorder), and a long file taken last would run while the others sit idle."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        slow_files = {item.path for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: item.path not in slow_files)  # stable: the order within each group is kept
    codec_items = [item for item in items if item.get_closest_marker("exact_codec")]
    reason = exact_codec_build() if codec_items else None
    for item in codec_items if reason else ():
        item.add_marker(pytest.mark.skip(reason=f"exact_codec: {reason}"))
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in gpu_items:
        item.add_marker(skip)


def assert_within_grey_levels(ours, reference, levels: int = 1, what=None) -> None:
    """uint8 images equal within `levels` grey levels: what a comparison with a third-party codec or resize
    allows, since their bytes depend on the build (libjpeg-turbo, IJG libjpeg, Pillow-SIMD); the bit-exact
    comparisons with the developers' build are marked `exact_codec`."""
    diff = np.abs(np.asarray(ours).astype(np.int64) - np.asarray(reference).astype(np.int64))
    assert diff.shape == np.asarray(reference).shape, (what, diff.shape)
    assert diff.size == 0 or diff.max() <= levels, (what, int(diff.max()), float((diff > levels).mean()))


def tiny_images(n: int, seed: int = 0, size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Random uint8 images whose mean colour depends on the label, so a linear model can learn it."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 10
    base = (y[:, None] * 23 % 256).astype(np.float64)
    x = rng.normal(base[:, None, None, :] * np.ones((1, size, size, 3)), 30.0)
    return np.clip(x, 0, 255).astype(np.uint8), y.astype(np.int64)


def fit_right_held_wrong(x: np.ndarray, predicted: np.ndarray, per_class: int) -> tuple[np.ndarray, np.ndarray]:
    """Images and labels, `per_class` of each of up to three classes, laid out so that the split the calibration
    code makes (stratified_split(labels, DEFAULT_HOLDOUT, seed 0)) fits on images the model classifies as their
    label and holds out images it gets wrong: a map fitted there sharpens a model the held-out part punishes. `x`
    are the candidate images, `predicted` the model's class for each."""
    from macs_audit.calibrators.selection import DEFAULT_HOLDOUT
    from macs_audit.data.splits import stratified_split

    held_count = round(DEFAULT_HOLDOUT * per_class)
    fit_count = per_class - held_count
    classes = [c for c in range(10) if (predicted == c).sum() >= fit_count and (predicted != c).sum() >= held_count]
    classes = classes[:3]
    labels = np.repeat(classes, per_class)
    held, fit = stratified_split(labels, DEFAULT_HOLDOUT, 0)
    images = np.empty((len(labels), *x.shape[1:]), dtype=x.dtype)
    for c in classes:
        right, wrong = np.flatnonzero(predicted == c), np.flatnonzero(predicted != c)
        images[fit[labels[fit] == c]] = x[right[:fit_count]]
        images[held[labels[held] == c]] = x[wrong[:held_count]]
    return images, labels


def linear_onnx(
    path,
    num_classes: int = 10,
    size: int | str = 32,
    softmax: bool = False,
    nan: bool = False,
    seed: int = 0,
    metadata: dict | None = None,
):
    """An ONNX classifier built with onnx.helper (no torch): global average pool -> linear (-> softmax)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = rng.normal(0, 3, size=(3, num_classes)).astype(np.float32)
    b = rng.normal(0, 0.1, size=(num_classes,)).astype(np.float32)
    nodes = [
        helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w", "b"], ["z"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    out = "z"
    if nan:
        inits.append(numpy_helper.from_array(np.array([np.nan], dtype=np.float32), "nan"))
        nodes.append(helper.make_node("Mul", ["z", "nan"], ["znan"]))
        out = "znan"
    if softmax:
        nodes.append(helper.make_node("Softmax", [out], ["probs"], axis=1))
        out = "probs"
    nodes.append(helper.make_node("Identity", [out], ["logits"]))
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", num_classes])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in (metadata or {}).items():
        model.metadata_props.add(key=key, value=value)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def one_torch_thread():
    """Tiny models run faster on one thread, and far faster when other jobs share the two cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def npz_data(tmp_path):
    x, y = tiny_images(60)
    path = tmp_path / "data.npz"
    np.savez(path, x=x, y=y)
    return path


@pytest.fixture
def onnx_model(tmp_path):
    return linear_onnx(tmp_path / "model.onnx")


# Real predictions for the calibrator tests (tests/calibrators/).
SAMPLE_ONNX = Path(__file__).resolve().parents[1] / "sample_models" / "resnet9_c10_ce.onnx"


@pytest.fixture(scope="session")
def sample_logits():
    """(logits (2000, 10) float32, labels) of the sample CIFAR-10 model on a class-stratified 2,000-image subset
    of the built-in test set (about 2 s on a CPU)."""
    assert SAMPLE_ONNX.exists(), f"{SAMPLE_ONNX} is part of the repository"
    from macs_audit.data.sources import load_source
    from macs_audit.data.splits import stratified_subset
    from macs_audit.models.predictor import load_predictor

    source = load_source(None)
    source = source.subset(stratified_subset(source.labels, 2000, seed=0))
    predictor = load_predictor(SAMPLE_ONNX, device="cpu")
    images = source.images(np.arange(len(source)))
    logits = [
        predictor.predict((images[i : i + 250].astype(np.float32) / 255.0).transpose(0, 3, 1, 2))
        for i in range(0, len(images), 250)
    ]
    return np.concatenate(logits), np.asarray(source.labels, dtype=np.int64)


@pytest.fixture(scope="session")
def sample_split(sample_logits):
    """The sample model's predictions split class-stratified in two halves of 1,000 (the built-in test set is
    sorted by class), as float64: (fit logits, fit labels, held-out logits, held-out labels)."""
    from macs_audit.data.splits import stratified_split

    z, y = sample_logits
    fit, held_out = stratified_split(y, 0.5, seed=0)
    z = z.astype(np.float64)
    return z[fit], y[fit], z[held_out], y[held_out]
