"""The inference loop's paths (auditing/inference.py, on data/batching.py and the predictors), checked on the CPU:
tensor views, device-resident batches, ImageFolder workers, torch tensors in, ORT threads."""

import numpy as np
import pytest
import torch
from conftest import linear_onnx, tiny_images
from PIL import Image


def test_views_tensor_path_equals_numpy_path():
    from macs_audit.views.view import CLEAN, corruption, perturbation

    images, _ = tiny_images(20, seed=1)
    t = torch.from_numpy(images)
    assert np.array_equal(CLEAN(images, 0), CLEAN(t, 0).numpy())
    for name in ("noise", "blur", "noise+blur"):
        v = perturbation(name, 0, "cpu")
        assert np.array_equal(v(images, 40), v(t, 40).numpy()), name
    for name in ("gaussian_noise", "contrast", "zoom_blur"):
        v = corruption(name, 3, 0, "cpu", None)
        assert np.array_equal(v(images, 40), v(t, 40).numpy()), name


def test_resident_batches_equal_host_batches():
    from macs_audit.data.batching import prefetched
    from macs_audit.data.sources import array_source
    from macs_audit.distributed import Context
    from macs_audit.views.view import perturbation

    x, y = tiny_images(50, seed=2)
    src = array_source("t", "npz", x, y, [str(i) for i in range(10)])
    resident = torch.from_numpy(x.copy())
    for ctx in (Context(), Context(rank=1, world_size=2)):
        view = perturbation("noise+blur", 0, "cpu")
        a = list(prefetched(src, 16, view, ctx))
        b = list(prefetched(src, 16, view, ctx, resident=resident))
        assert [s for s, _, _ in a] == [s for s, _, _ in b]
        for (_, xa, ya), (_, xb, yb) in zip(a, b, strict=True):
            assert np.array_equal(xa, xb.numpy()) and np.array_equal(ya, yb)


def _folder(tmp_path, n=30, bad=False):
    x, y = tiny_images(n, seed=3)
    for i, (img, lab) in enumerate(zip(x, y, strict=True)):
        d = tmp_path / f"c{lab}"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(d / f"{i}.png")
    if bad:
        (tmp_path / "c0" / "zz_bad.png").write_bytes(b"not a png")
    return tmp_path


def test_imagefolder_workers_equal_in_process(tmp_path):
    from macs_audit.auditing import Loop, evaluate_view
    from macs_audit.data.sources import load_source
    from macs_audit.models.predictor import load_predictor

    src = load_source(_folder(tmp_path / "f"), "imagefolder")
    pred = load_predictor(linear_onnx(tmp_path / "m.onnx"), device="cpu")
    a, la = evaluate_view(pred, src, 10, Loop(8, workers=0), keep_logits=True)
    b, lb = evaluate_view(pred, src, 10, Loop(8, workers=2), keep_logits=True)
    assert np.array_equal(la, lb) and a.compute() == b.compute()


def test_imagefolder_worker_error_is_one_line(tmp_path):
    from macs_audit.auditing import Loop, evaluate_view
    from macs_audit.data.sources import load_source
    from macs_audit.errors import InputError
    from macs_audit.models.predictor import load_predictor

    src = load_source(_folder(tmp_path / "f", bad=True), "imagefolder", image_size=(32, 32))
    pred = load_predictor(linear_onnx(tmp_path / "m.onnx"), device="cpu")
    with pytest.raises(InputError) as info:
        evaluate_view(pred, src, 10, Loop(8, workers=2))
    assert "cannot read image" in str(info.value) and "\n" not in str(info.value)


def test_torch_predict_accepts_tensors_and_sensitivity_unchanged(tmp_path):
    import timm

    from macs_audit.metrics.sensitivity import sensitivity
    from macs_audit.models import architectures  # noqa: F401
    from macs_audit.models.export import save_safetensors, write_sidecar
    from macs_audit.models.predictor import load_predictor

    torch.manual_seed(0)
    save_safetensors(timm.create_model("macs_resnet9_c10", num_classes=10).eval(), tmp_path / "m.safetensors")
    write_sidecar(tmp_path / "m.json", {"arch": "macs_resnet9_c10", "num_classes": 10, "input_size": [32, 32]})
    p = load_predictor(tmp_path / "m.safetensors", device="cpu")
    images, labels = tiny_images(16, seed=4)
    x = np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float32) / 255
    assert np.array_equal(p.predict(x), p.predict(torch.from_numpy(x)))
    s = sensitivity(p, x, labels)
    assert s["method"] == "autograd" and s["lipschitz"] > 0


def test_onnx_threads_follow_omp_num_threads(tmp_path, monkeypatch):
    from macs_audit.models.predictor import load_predictor

    seen = []
    import onnxruntime as ort

    orig = ort.InferenceSession.__init__

    def init(self, path, sess_options=None, *a, **k):
        seen.append(sess_options.intra_op_num_threads)
        orig(self, path, sess_options, *a, **k)

    monkeypatch.setattr(ort.InferenceSession, "__init__", init)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    load_predictor(linear_onnx(tmp_path / "m.onnx"), device="cpu")
    monkeypatch.delenv("OMP_NUM_THREADS")
    load_predictor(tmp_path / "m.onnx", device="cpu")
    assert seen == [1, 0]
