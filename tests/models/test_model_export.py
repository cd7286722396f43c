"""models/export.py (tests/cli/test_export.py has the command): where written weights go, which files a written
model may have (what the commands check before they write), and the weights written in their format."""

from pathlib import Path

import pytest
import torch

from macs_audit.models.export import model_files, weights_path, write_weights


def test_weights_go_to_safetensors_for_a_state_dict_and_pt_otherwise():
    out = Path("out")
    assert weights_path(out, "m", "safetensors") == out / "m.safetensors"
    assert weights_path(out, "m", "state-dict") == out / "m.safetensors"
    assert weights_path(out, "m", "torchscript") == out / "m.pt"
    assert weights_path(out, "m", "torchvision") == out / "m.safetensors"  # its sidecar names torchvision:NAME
    assert weights_path(out, "m", "hf-transformers") == out / "m"  # a save_pretrained folder
    assert weights_path(out, "m", "pickled-module") == out / "m.pt"


def test_the_files_a_written_model_may_have():
    assert model_files("m") == ["m.safetensors", "m.pt", "m.json"]
    assert model_files("m", onnx_file=True) == ["m.safetensors", "m.pt", "m.onnx", "m.json"]
    assert model_files("m", torch_weights=False, onnx_file=True) == ["m.onnx", "m.json"]


def test_write_weights_keeps_each_format(tmp_path):
    from safetensors.torch import load_file

    net = torch.nn.Linear(3, 2)
    write_weights(net, weights_path(tmp_path, "a", "state-dict"), "state-dict")
    assert set(load_file(str(tmp_path / "a.safetensors"))) == {"weight", "bias"}
    write_weights(torch.jit.script(net), weights_path(tmp_path, "b", "torchscript"), "torchscript")
    x = torch.randn(4, 3)
    torch.testing.assert_close(torch.jit.load(str(tmp_path / "b.pt"))(x), net(x))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.safetensors", "b.pt"]  # no temporaries left


def test_exported_programs_and_zero_shot_heads_are_not_rewritten(tmp_path):
    from macs_audit.errors import InputError
    from macs_audit.models.export import check_writable

    for fmt in ("torch-export", "open-clip"):
        with pytest.raises(InputError, match="ONNX export"):
            check_writable(fmt)
