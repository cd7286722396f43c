"""`macs-audit export`: one ONNX file, dynamic batch, the metadata `evaluate` reads, nothing from the build machine."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import timm
import torch
from typer.testing import CliRunner

import macs_audit
from macs_audit.cli import app
from macs_audit.models import architectures  # noqa: F401
from macs_audit.models.export import save_safetensors
from macs_audit.models.predictor import load_predictor

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    torch.manual_seed(0)
    net = timm.create_model("macs_resnet9_c10", num_classes=10).eval()
    save_safetensors(net, tmp / "net.safetensors")
    result = runner.invoke(
        app,
        [
            "export",
            str(tmp / "net.safetensors"),
            "--arch",
            "macs_resnet9_c10",
            "--input-size",
            "16",
            "--mean",
            "0.5,0.5,0.5",
            "--std",
            "0.25,0.25,0.25",
            "--model-output",
            "logits",
            "--out",
            str(tmp / "net.onnx"),
        ],
    )
    assert result.exit_code == 0, result.output
    return net, tmp / "net.onnx"


def test_export_runs_with_any_batch_and_matches_torch(exported):
    net, path = exported
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape[0] not in (1, 2)  # a symbolic batch axis
    for batch in (1, 5):
        x = np.random.default_rng(batch).normal(size=(batch, 3, 16, 16)).astype(np.float32)
        with torch.no_grad():
            want = net(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x})[0], want, rtol=1e-4, atol=1e-5)


def test_export_carries_the_metadata_evaluate_reads(exported):
    net, path = exported
    predictor = load_predictor(path, device="cpu")  # no sidecar next to it: metadata only
    assert not path.with_suffix(".json").exists()
    cfg = predictor.config
    assert cfg.input_size == (16, 16) and cfg.mean == (0.5, 0.5, 0.5) and cfg.std == (0.25, 0.25, 0.25)
    assert cfg.arch == "macs_resnet9_c10" and cfg.num_classes == 10 and cfg.output == "logits"
    assert cfg.sources["mean"] == "metadata"
    x = np.random.default_rng(0).random((2, 3, 16, 16), dtype=np.float32)
    with torch.no_grad():
        want = net((torch.from_numpy(x) - 0.5) / 0.25).numpy()
    np.testing.assert_allclose(predictor.predict(x), want, rtol=1e-4, atol=1e-5)


def test_export_holds_no_paths_or_stack_traces(exported):
    _, path = exported
    data = path.read_bytes()
    leaks = {
        str(path.parent),
        str(Path.cwd()),
        str(Path(macs_audit.__file__).parent.parent),
        sys.prefix,
        os.path.expanduser("~"),
        "site-packages",
        "Traceback",
        'File "',
        ".py",
        "stack_trace",
    }
    found = [leak for leak in leaks if leak and leak != "/" and leak.encode() in data]
    assert not found, found
    model = onnx.load(str(path))
    keys = {p.key for node in model.graph.node for p in node.metadata_props}
    keys |= {p.key for fn in model.functions for node in fn.node for p in node.metadata_props}
    assert not [k for k in keys if "stack" in k or "source" in k or "namespace" in k or "class_hierarchy" in k]
    assert model.producer_name == "macs-audit" and not model.doc_string
    assert not list(path.parent.glob("*.data"))  # one file: no external weights


def test_export_uses_the_sidecar(tmp_path):
    save_safetensors(timm.create_model("macs_resnet9_c10", num_classes=10), tmp_path / "w.safetensors")
    (tmp_path / "w.json").write_text(
        json.dumps({"arch": "macs_resnet9_c10", "input_size": [8, 8], "class_names": [f"c{i}" for i in range(10)]})
    )
    result = runner.invoke(app, ["export", str(tmp_path / "w.safetensors")])
    assert result.exit_code == 0, result.output
    props = {p.key: json.loads(p.value) for p in onnx.load(str(tmp_path / "w.onnx")).metadata_props}
    assert props["macs_audit.input_size"] == [8, 8] and props["macs_audit.class_names"][3] == "c3"


def test_export_refuses_an_existing_onnx_file_without_force(tmp_path):
    save_safetensors(timm.create_model("macs_resnet9_c10", num_classes=10), tmp_path / "w.safetensors")
    (tmp_path / "w.json").write_text(json.dumps({"arch": "macs_resnet9_c10", "input_size": [8, 8]}))
    (tmp_path / "w.onnx").write_bytes(b"someone else's model")
    result = runner.invoke(app, ["export", str(tmp_path / "w.safetensors")])
    assert result.exit_code == 2 and "w.onnx already exists; pass --force" in result.stderr
    assert (tmp_path / "w.onnx").read_bytes() == b"someone else's model"
    result = runner.invoke(app, ["export", str(tmp_path / "w.safetensors"), "--force"])
    assert result.exit_code == 0, result.output
    assert onnx.load(str(tmp_path / "w.onnx")).producer_name == "macs-audit"


def test_a_checkpoint_exported_at_fp16_writes_the_float_export_and_the_build(exported, tmp_path):
    _, path = exported
    checkpoint = tmp_path / "net.safetensors"
    checkpoint.write_bytes(path.with_suffix(".safetensors").read_bytes())
    flags = ["--arch", "macs_resnet9_c10", "--input-size", "16", "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25"]
    result = runner.invoke(app, ["export", str(checkpoint), *flags, "--precision", "fp16", "--no-audit"])
    assert result.exit_code == 0, result.output
    assert "float ONNX model written to" in result.output and "FP16 model written to" in result.output
    built = load_predictor(tmp_path / "net.fp16.onnx", device="cpu")  # metadata only, as the float export
    assert built.config.input_size == (16, 16) and built.config.mean == (0.5, 0.5, 0.5)
    x = np.random.default_rng(0).random((4, 3, 16, 16), dtype=np.float32)
    float_model = load_predictor(tmp_path / "net.onnx", device="cpu")
    np.testing.assert_allclose(built.predict(x), float_model.predict(x), atol=0.05, rtol=0.02)
