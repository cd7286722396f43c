"""--data's classes meet the model's outputs by name (data/label_space.py, auditing/classes.py): a model whose
outputs are the sample model's in another order scores the sample model's predictions; by position only where a
side names no classes, and said; names that do not match are a one-line error naming --class-map; --class-map
maps --data; a folder of a subset of the model's classes is scored restricted to them, unrestricted beside."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.data.sources import CIFAR10_CLASSES, builtin_cifar10_test
from macs_audit.models.predictor import load_predictor

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[2] / "sample_models" / "resnet9_c10_ce.onnx"
PERMUTATION = (
    3,
    7,
    0,
    9,
    5,
    1,
    8,
    2,
    6,
    4,
)  # output j of the permuted model is the sample model's output PERMUTATION[j]
QUICK = ("--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--calibrators", "none")
PER_CLASS = 30  # 300 images


def _images() -> tuple[np.ndarray, np.ndarray]:
    """The first PER_CLASS built-in test images of each class, as uint8 (N, 32, 32, 3), and their labels."""
    source = builtin_cifar10_test()
    positions = np.concatenate([np.flatnonzero(source.labels == c)[:PER_CLASS] for c in range(10)])
    return source.images(positions), source.labels[positions]


def _folder(root: Path, names: dict[int, str] | None = None, classes: tuple[int, ...] = tuple(range(10))) -> Path:
    """root/<name>/<i>.png of the built-in images of `classes` (PNG: the same pixels the npz holds)."""
    from PIL import Image

    x, y = _images()
    for i, (image, label) in enumerate(zip(x, y, strict=True)):
        if int(label) in classes:
            folder = root / (names or dict(enumerate(CIFAR10_CLASSES)))[int(label)]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(folder / f"{i:04d}.png")
    return root


def _permuted(path: Path, names: bool = True) -> Path:
    """The sample model with a Gather that reorders its logits by PERMUTATION, its class names reordered to match
    in its metadata (withheld where `names` is False); no sidecar."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(SAMPLE))
    graph = model.graph
    output = graph.output[0]
    graph.initializer.append(numpy_helper.from_array(np.asarray(PERMUTATION, dtype=np.int64), "permutation"))
    graph.node.append(helper.make_node("Gather", [output.name, "permutation"], ["permuted"], axis=1))
    output.name = "permuted"
    # The names go with the outputs; the withheld names leave nothing to match by.
    props = {p.key: p.value for p in model.metadata_props}
    del model.metadata_props[:]
    if names:
        props["macs_audit.class_names"] = json.dumps([CIFAR10_CLASSES[p] for p in PERMUTATION])
    else:
        props.pop("macs_audit.class_names")
    for key, value in props.items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
    onnx.save(model, str(path))
    return path


def _audit(model: Path, data: Path, tmp: Path, *extra: str) -> tuple[dict, str]:
    report = tmp / f"r{len(list(tmp.glob('r*.json')))}.json"
    result = runner.invoke(app, ["evaluate", str(model), "--data", str(data), *QUICK, "-o", str(report), *extra])
    assert result.exit_code == 0, result.output
    return json.loads(report.read_text()), result.output


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("classes")
    _folder(tmp / "folder")
    _permuted(tmp / "permuted.onnx")
    _permuted(tmp / "unnamed.onnx", names=False)
    return tmp


@pytest.fixture(scope="module")
def sample_report(work) -> dict:
    return _audit(SAMPLE, work / "folder", work)[0]


def test_the_sample_model_on_the_folder_matches_by_name(sample_report):
    matching = sample_report["data"]["class_matching"]
    assert matching["by"] == "name" and matching["outputs"] == list(range(10)) and not matching["restricted"]
    assert sample_report["clean"]["metrics"]["n"] == 10 * PER_CLASS


def test_a_permuted_model_with_its_names_gives_the_sample_models_predictions(work, sample_report):
    report, output = _audit(work / "permuted.onnx", work / "folder", work)
    matching = report["data"]["class_matching"]
    assert matching["by"] == "name"
    assert matching["outputs"] == [PERMUTATION.index(c) for c in range(10)]  # data class c is where c went
    # The same predictions: every count-based number to the last digit, the rest as the same sums give them.
    for key in ("n", "accuracy"):
        assert report["clean"]["metrics"][key] == sample_report["clean"]["metrics"][key]
    for key in ("ece", "nll", "brier"):
        assert report["clean"]["metrics"][key] == pytest.approx(sample_report["clean"]["metrics"][key], abs=1e-9)
    assert report["temperature_scaling"]["temperature"] == pytest.approx(
        sample_report["temperature_scaling"]["temperature"], rel=1e-6
    )
    assert "by name" in output
    assert "unrestricted" not in report["clean"] and "class_matching" not in report["conventions"]


def test_the_permuted_model_without_names_goes_by_position_and_says_so(work, sample_report):
    report, output = _audit(work / "unnamed.onnx", work / "folder", work)
    assert report["data"]["class_matching"]["by"] == "position"
    assert report["data"]["class_matching"]["reason"] == "the model names no classes"
    assert "by position (the model names no classes)" in output
    # Data class c read as output c, which is the sample model's output PERMUTATION[c]: the permuted logits' argmax.
    x, y = _images()
    logits = load_predictor(SAMPLE).predict(x.transpose(0, 3, 1, 2).astype(np.float32) / 255.0)
    by_position = float(np.mean(logits[:, list(PERMUTATION)].argmax(1) == y))
    assert by_position < sample_report["clean"]["metrics"]["accuracy"] - 0.3
    assert report["clean"]["metrics"]["accuracy"] == pytest.approx(by_position, abs=1e-12)


NAMES = {c: f"cls_{c}" for c in range(10)}


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    folder: dict[int, str]  # data class -> folder name
    class_map: dict[str, int] | None  # written as m.json and passed with --class-map
    exit_code: int
    message: str


REFUSED = [
    Case("names-shared-with-none", NAMES, None, 3, "are none of the model's class names"),
    Case(
        "some-names-unknown",
        {**dict(enumerate(CIFAR10_CLASSES)), 3: "kitten", 5: "puppy"},
        None,
        3,
        "2 of the data's classes do not map: kitten, puppy; pass --class-map FILE",
    ),
    Case("class-map-names-nothing", NAMES, {"bus": 1}, 2, "--class-map m.json names none of the classes of --data"),
    Case(  # the data matches by name; a map of some of its classes maps no set, and is not left unused in silence
        "class-map-maps-no-set",
        dict(enumerate(CIFAR10_CLASSES)),
        {"cat": 3, "dog": 5},
        2,
        "--class-map m.json names every class of no set, so it maps none (a map applies to a set where it names all "
        "of its classes): --data's airplane, truck are not in it",
    ),
    Case(
        "class-map-leaves-some-out",
        NAMES,
        {"cls_0": 0},
        3,
        "class map m.json: 3 of the data's classes do not map: cls_3, cls_5, cls_9",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c.id for c in REFUSED])
def test_names_that_do_not_match_are_refused_in_one_line(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    _folder(tmp_path / "data", case.folder, classes=(0, 3, 5, 9))
    args = ["evaluate", str(SAMPLE), "--data", str(tmp_path / "data"), *QUICK, "-q"]
    if case.class_map is not None:
        (tmp_path / "m.json").write_text(json.dumps(case.class_map))
        args += ["--class-map", "m.json"]
    result = runner.invoke(app, args)
    assert result.exit_code == case.exit_code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and case.message in lines[0], result.stderr
    if case.exit_code == 3 and case.class_map is None:
        assert "--class-map" in lines[0]


def test_a_class_map_maps_the_data(work, sample_report, tmp_path):
    data = _folder(tmp_path / "data", NAMES)
    (tmp_path / "m.json").write_text(json.dumps({name: c for c, name in NAMES.items()}))
    report, output = _audit(SAMPLE, data, tmp_path, "--class-map", str(tmp_path / "m.json"))
    assert report["data"]["class_matching"]["by"] == "class-map"
    assert report["clean"]["metrics"]["accuracy"] == sample_report["clean"]["metrics"]["accuracy"]
    assert "by class map" in output


def test_a_subset_of_the_classes_is_scored_restricted_and_unrestricted(tmp_path):
    kept = (3, 5, 8)  # cat, dog, ship
    data = _folder(tmp_path / "data", classes=kept)
    report, output = _audit(SAMPLE, data, tmp_path, "--perturbations", "noise")
    matching = report["data"]["class_matching"]
    assert matching["by"] == "name" and matching["outputs"] == list(kept) and matching["restricted"]
    assert matching["num_outputs"] == 10 and report["data"]["num_classes"] == 3
    assert "class_matching" in report["conventions"]
    # Restricted: the argmax over the three classes' logits; unrestricted: over all ten, the labels as outputs.
    x, y = _images()
    inside = np.isin(y, kept)
    logits = load_predictor(SAMPLE).predict(x[inside].transpose(0, 3, 1, 2).astype(np.float32) / 255.0)
    labels = np.searchsorted(kept, y[inside])
    restricted = float(np.mean(logits[:, list(kept)].argmax(1) == labels))
    unrestricted = float(np.mean(logits.argmax(1) == y[inside]))
    assert restricted > unrestricted
    assert report["clean"]["metrics"]["accuracy"] == pytest.approx(restricted, abs=1e-12)
    assert report["clean"]["unrestricted"]["accuracy"] == pytest.approx(unrestricted, abs=1e-12)
    noise = next(v for v in report["views"] if v["name"] == "noise")
    assert noise["unrestricted"]["n"] == noise["metrics"]["n"] == len(labels)
    assert len(report["clean"]["per_class"]) == 3
    assert "3 of the model's 10 outputs" in output


@pytest.mark.parametrize("kind", ["hf", "timm"])
def test_hugging_face_and_timm_class_names_map_by_name(tmp_path, kind):
    pytest.importorskip("transformers" if kind == "hf" else "timm")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the model-source tests' builders
    from source_builders import CLASSES, hf_folder, photo_folder, timm_folder

    data, _ = photo_folder(tmp_path / "photos")
    model = tmp_path / "model"
    (hf_folder if kind == "hf" else timm_folder)(model)
    config = json.loads((model / "config.json").read_text())
    quick = (*QUICK, "--calibration-split", "0", "-q", "--save-predictions")
    base = _audit(model, data, tmp_path, *quick, str(tmp_path / "p0.npz"))[0]
    reordered = (CLASSES[1], CLASSES[2], CLASSES[0])  # output i now named reordered[i]
    if kind == "hf":
        config["id2label"] = dict(enumerate(reordered))
        config["label2id"] = {name: i for i, name in enumerate(reordered)}
    else:
        config["label_names"] = list(reordered)
    (model / "config.json").write_text(json.dumps(config))
    report = _audit(model, data, tmp_path, *quick, str(tmp_path / "p1.npz"))[0]
    assert base["data"]["class_matching"]["outputs"] == [0, 1, 2]
    assert report["data"]["class_matching"]["by"] == "name"
    assert report["data"]["class_matching"]["outputs"] == [2, 0, 1]  # cat is output 2, dog 0, fox 1
    logits0, logits1 = np.load(tmp_path / "p0.npz")["logits"], np.load(tmp_path / "p1.npz")["logits"]
    # The data's classes' columns: cat's is output 2 now, where it was output 0.
    np.testing.assert_allclose(logits1, logits0[:, [2, 0, 1]], rtol=1e-5, atol=1e-6)


def test_a_shift_sets_class_map_that_names_a_clean_class_leaves_the_clean_data_by_name(work, tmp_path):
    """README's `--shift-data mine=DIR --class-map FILE`: the map names the shift set's classes, "cat" among them,
    a name the clean data holds too; it maps the shift set (all of whose classes it names) and leaves the clean
    data, of which it names one class, to match by name."""
    mine = {3: "cat", 5: "hound", 8: "boat"}  # the sample model's cat, dog and ship, two of them renamed
    shift = _folder(tmp_path / "mine", mine, classes=tuple(mine))
    (tmp_path / "m.csv").write_text("class,index\n" + "".join(f"{name},{c}\n" for c, name in mine.items()))
    shift_args = ("--shift-data", f"mine={shift}", "--class-map", str(tmp_path / "m.csv"))
    report, _ = _audit(SAMPLE, work / "folder", tmp_path, *shift_args)
    matching = report["data"]["class_matching"]
    assert matching["by"] == "name" and matching["outputs"] == list(range(10)) and not matching["restricted"]
    (mapped,) = report["shift"]["sets"].values()
    assert "class map" in mapped["mapped_by"] and mapped["num_classes"] == 3


def test_calibrate_reads_classes_in_another_order_as_the_matched_outputs(work, tmp_path, monkeypatch):
    """The permuted model's outputs are the sample model's in another order, named to match: calibrate matches the
    folder's classes by name, reads each label as its class's output and fits the temperature the sample model
    gets (the same logits paired with the same labels), saying how the classes were matched."""
    monkeypatch.chdir(tmp_path)
    temperatures = []
    for i, model in enumerate((SAMPLE, work / "permuted.onnx")):
        args = ["calibrate", str(model), "--data", str(work / "folder"), "--eval-data", str(work / "folder")]
        result = runner.invoke(app, [*args, "--out", f"out{i}", *QUICK[:6], "--force-calibration", "-q"])
        assert result.exit_code == 0, result.output
        record = json.loads((tmp_path / f"out{i}" / "calibration.json").read_text())
        temperatures.append(record["parameters"]["temperature"])
        matching = record["fit_data"]["class_matching"]
        assert matching["by"] == "name"
        converted = "the data's classes are the model's outputs in another order, matched by the model's class names"
        assert (converted in result.stderr) == (i == 1), result.stderr
    assert matching["outputs"] == [PERMUTATION.index(c) for c in range(10)]
    assert temperatures[1] == pytest.approx(temperatures[0], rel=1e-6)


def test_a_fit_refuses_a_subset_of_the_classes(tmp_path, monkeypatch):
    """calibrate fits every output: data of a subset of them is refused in one line."""
    monkeypatch.chdir(tmp_path)
    data = _folder(tmp_path / "data", classes=(3, 5, 8))
    args = ["calibrate", str(SAMPLE), "--data", str(data), "--eval-data", str(data), "--out", "calibrated", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    message = "data): fitting needs data of every output; `evaluate --data` scores a subset"
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not any(tmp_path.glob("calibrated*"))


@pytest.fixture
def finetune_work(tmp_path, monkeypatch, one_torch_thread) -> Path:
    """A 16 px ResNet-9 whose sidecar names its outputs CIFAR-10's classes in PERMUTATION's order, and .npz
    training and evaluation sets that name their classes in CIFAR-10's order."""
    import timm
    import torch
    from conftest import tiny_images

    from macs_audit.models import architectures  # noqa: F401  (registers macs_resnet9_c10)
    from macs_audit.models.export import save_safetensors, write_sidecar

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    save_safetensors(timm.create_model("macs_resnet9_c10", num_classes=10), tmp_path / "net.safetensors")
    names = [CIFAR10_CLASSES[p] for p in PERMUTATION]
    write_sidecar(
        tmp_path / "net.json",
        {"arch": "macs_resnet9_c10", "num_classes": 10, "input_size": [16, 16], "class_names": names},
    )
    for name, seed, n in (("train", 0, 100), ("test", 1, 40)):
        x, y = tiny_images(n, seed=seed, size=16)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y, class_names=np.asarray(CIFAR10_CLASSES))
    x, y = tiny_images(60, size=16)
    np.savez(tmp_path / "three.npz", x=x, y=y % 3, class_names=np.asarray(CIFAR10_CLASSES[:3]))
    return tmp_path


FINETUNE = ("finetune", "net.safetensors", "--out", "ft", "--eval-data", "test.npz", "--epochs", "0.2")
FINETUNE_QUICK = (*FINETUNE, "--batch-size", "16", *QUICK[:6], "--force-temperature", "-q")


def test_finetune_trains_on_the_labels_as_the_matched_outputs(finetune_work, monkeypatch):
    """Training data whose classes are the model's outputs in another order: matched by name, each label read as
    its class's output (what the loop trains on), said in a note and in finetune_config.json."""
    from macs_audit.finetune import loop

    trained_on = []

    def recording(model, source, *args, **kwargs):
        trained_on.append(source)
        return finetune(model, source, *args, **kwargs)

    finetune = loop.finetune
    monkeypatch.setattr(loop, "finetune", recording)
    # The ONNX exports (most of the run's time) are not what this test is about: the run writes the weights alone.
    monkeypatch.setattr("macs_audit.finetune.run.export_if_possible", lambda *args: "ONNX export left out")
    result = runner.invoke(app, [*FINETUNE_QUICK, "--data", "train.npz"])
    assert result.exit_code == 0, result.output
    outputs = [PERMUTATION.index(c) for c in range(10)]  # CIFAR-10's class c is output outputs[c]
    (source,) = trained_on
    labels = np.load(finetune_work / "train.npz")["y"]
    split = json.loads((finetune_work / "ft" / "finetune_config.json").read_text())
    np.testing.assert_array_equal(source.labels, np.asarray(outputs)[labels])
    assert source.class_names == [CIFAR10_CLASSES[p] for p in PERMUTATION]
    assert split["data"]["class_matching"]["by"] == "name" and split["data"]["class_matching"]["outputs"] == outputs
    assert "train.npz: the data's classes are the model's outputs in another order, matched by" in result.stderr


def test_finetune_refuses_training_data_of_a_subset_of_the_classes(finetune_work):
    result = runner.invoke(app, [*FINETUNE_QUICK, "--data", "three.npz"])
    assert result.exit_code == 3, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert (
        "the model has 10 classes but the data set has 3 (" in lines[0]
        and "fitting needs data of every output" in lines[0]
    )
    assert not (finetune_work / "ft" / "model.safetensors").exists()


def test_more_classes_than_outputs_names_the_ones_the_model_lacks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = _folder(tmp_path / "data")
    (data / "Cat").mkdir()  # a case-twin folder: 11 classes against 10 outputs
    for image in (data / "cat").iterdir():
        (data / "Cat" / image.name).write_bytes(image.read_bytes())
    result = runner.invoke(app, ["evaluate", str(SAMPLE), "--data", str(data), *QUICK, "-q"])
    assert result.exit_code == 3, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "the data set has 11" in lines[0] and "not among its names: Cat)" in lines[0], lines[0]
    assert lines[0].endswith("leave them out of --data"), lines[0]
