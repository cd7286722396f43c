"""models/sources.py: what a model argument is, told from the path and the --arch prefix; a missing optional
extra named in one line; the heavy libraries imported only on their own paths."""

import json
import subprocess
import sys
import textwrap

import pytest

from macs_audit.errors import InputError, UsageError
from macs_audit.models import sources
from macs_audit.models.predictor import load_predictor


def _folder(tmp_path, config):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize(
    "config, kind",
    [
        ({"architecture": "resnet18", "num_classes": 3}, sources.TIMM_FOLDER),
        ({"model_type": "vit", "num_labels": 3}, sources.HF_TRANSFORMERS),
    ],
)
def test_a_folder_is_told_by_its_config(tmp_path, config, kind):
    assert sources.resolve_source(_folder(tmp_path, config), None).kind == kind


def test_prefixes_and_files(tmp_path):
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"x")
    assert sources.resolve_source(weights, "torchvision:resnet50") == sources.ModelSource(
        sources.TORCHVISION, weights, name="resnet50"
    )
    assert sources.resolve_source(weights, "open_clip:ViT-B-32").kind == sources.OPEN_CLIP
    assert sources.resolve_source(weights, "resnet18").kind == "file"  # a timm name: the torch backend's
    (tmp_path / "p.pt2").write_bytes(b"x")
    assert sources.resolve_source(tmp_path / "p.pt2", None).kind == sources.TORCH_EXPORT


def test_missing_extra_is_one_line_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if not installed
    with pytest.raises(InputError) as caught:
        sources.require("transformers", "hf")
    assert str(caught.value) == "this model needs transformers, which is not installed: pip install 'macs-audit[hf]'"


def test_a_hugging_face_folder_without_the_extra(tmp_path, monkeypatch):
    folder = _folder(tmp_path, {"model_type": "vit", "num_labels": 3})
    (folder / "model.safetensors").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(InputError, match=r"pip install 'macs-audit\[hf\]'"):
        load_predictor(folder, device="cpu")


def test_hub_name_not_cached_fails_at_once_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match="not in the local Hugging Face cache"):
        sources.resolve_source("hf-hub:timm/resnet18.a1_in1k", None)


def test_the_onnx_path_imports_no_torch_nor_the_extras(tmp_path):
    """Loading and running an ONNX model imports neither torch nor any source's library (models/sources.py
    included: it names them, it does not import them)."""
    from conftest import linear_onnx

    model = linear_onnx(tmp_path / "m.onnx")
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from macs_audit.models.predictor import load_predictor
        p = load_predictor({str(model)!r}, device="cpu")
        p.predict(np.zeros((2, 3, 32, 32), dtype=np.float32))
        heavy = [m for m in ("torch", "timm", "torchvision", "transformers", "open_clip") if m in sys.modules]
        sys.exit(f"imported {{heavy}}" if heavy else 0)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_json_file_that_is_not_one_object_is_named_with_what_it_should_hold(tmp_path):
    path = tmp_path / "prompts.json"
    path.write_text("[1, 2]")
    with pytest.raises(UsageError, match=r'^--class-prompts .*prompts.json must hold a JSON object \{"classes"'):
        sources.read_json_object(path, named="--class-prompts", holds='{"classes": [...]}')
    with pytest.raises(InputError, match=r"prompts.json must hold a JSON object$"):
        sources.read_json_object(path)
    path.write_text("{")
    with pytest.raises(InputError, match=r"prompts.json: not valid JSON"):
        sources.read_json_object(path)
    path.write_text('{"a": 1}')
    assert sources.read_json_object(path) == {"a": 1}
