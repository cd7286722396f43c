"""Every ```python block of docs/api.md runs as it is, in a folder holding the files its examples name: model.onnx
(the sample CIFAR-10 model and its sidecar), test.npz and fit.npz (200 and 1,200 other images of the built-in
CIFAR-10 test set),
predictions.npz (logits and labels) and report.json (the sample model's saved report)."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"
SAMPLE = ROOT / "sample_models" / "resnet9_c10_ce"


def blocks() -> list[tuple[str, str]]:
    """(the heading above it, its code) of each ```python block of docs/api.md, in order."""
    text = DOC.read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        heading = re.findall(r"^#+ (.+)$", text[: match.start()], flags=re.M)[-1]
        found.append((heading, match.group(1)))
    return found


def test_the_doc_has_an_example_of_each_part_of_the_api():
    code = "\n".join(code for _, code in blocks())
    for call in ("macs_audit.audit(", "audit_predictions(", "macs_audit.gate(", "macs_audit.calibrate(", ".save("):
        assert call in code, call


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory):
    from macs_audit.data.sources import builtin_cifar10_test
    from macs_audit.data.splits import stratified_subset

    folder = tmp_path_factory.mktemp("api_examples")
    shutil.copy(SAMPLE.with_suffix(".onnx"), folder / "model.onnx")
    shutil.copy(SAMPLE.with_suffix(".json"), folder / "model.json")
    shutil.copy(SAMPLE.with_suffix(".audit.json"), folder / "report.json")
    source = builtin_cifar10_test()
    source = source.subset(stratified_subset(source.labels, 1400, seed=0))
    images, labels, names = source.images(np.arange(len(source))), source.labels, np.array(source.class_names)
    test = np.arange(len(source)) % 7 == 0  # 200 images; the other 1,200 a fit set (calibrate scores 360 of them)
    np.savez(folder / "test.npz", x=images[test], y=labels[test], class_names=names)
    np.savez(folder / "fit.npz", x=images[~test], y=labels[~test], class_names=names)
    rng = np.random.default_rng(0)
    labels = np.arange(1000) % 10
    logits = rng.normal(0, 1, (1000, 10))
    logits[np.arange(1000), np.where(rng.random(1000) < 0.8, labels, rng.integers(0, 10, 1000))] += 3.5
    np.savez(folder / "predictions.npz", logits=logits.astype(np.float32), labels=labels)
    return folder


@pytest.mark.parametrize(("heading", "code"), blocks(), ids=[f"{i}-{h}" for i, (h, _) in enumerate(blocks(), 1)])
def test_the_example_runs(heading, code, example_folder, tmp_path, monkeypatch, capsys):
    for name in ("model.onnx", "model.json", "test.npz", "fit.npz", "predictions.npz", "report.json"):
        shutil.copy(example_folder / name, tmp_path / name)  # each example its own copies: they write files
    (tmp_path / ".git").mkdir()  # no gate config above to find
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{DOC.name}: {heading}", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.strip(), "every example prints what it shows"
