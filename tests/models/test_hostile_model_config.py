"""Hostile values in the files a model comes with (a timm folder's config.json, a Hugging Face folder's config.json
and preprocessor_config.json, a sidecar, OpenCLIP's --class-prompts): each is one line naming the key and the file,
with the documented exit code (docs/errors.md), never `unexpected <Exception>`, a silent default or an allocation
of the size a file claims.

Each row copies a tiny model folder (built once per module), edits one JSON value, and runs `evaluate` on it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from source_builders import CLASSES, QUICK, TINY_CLIP, hf_folder, three_class_npz, timm_folder, tiny_clip
from typer.testing import CliRunner

from macs_audit.cli import app

runner = CliRunner()
TERA = 10**12  # a class count whose classifier would take terabytes
MAX_JSON_BYTES = 64 * 2**20  # docs/errors.md, Limits (macs_audit.models.sources.MAX_JSON_BYTES)


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    file: str  # the file the edit is made in (and the message names), relative to the model folder
    edit: Callable[[dict[str, Any]], object]  # changes the file's JSON object in place
    message: str  # a fragment of the one-line error, which names the key
    exit_code: int = 2  # a configuration value that does not fit is a usage error (docs/errors.md)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets the key at `path` ('pretrained_cfg.interpolation') to `value`."""

    def edit(data: dict[str, Any]) -> None:
        *parents, key = path.split(".")
        for parent in parents:
            data = data[parent]
        data[key] = value

    return edit


def _all(*edits: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        for one in edits:
            one(data)

    return edit


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda data: data.pop(key)


TIMM = "config.json"
TIMM_ROWS = [
    Row("interpolation-list", TIMM, _set("pretrained_cfg.interpolation", ["bicubic"]),
        "pretrained_cfg.interpolation must be one of bilinear, bicubic, nearest, got ['bicubic'] from"),
    Row("interpolation-number", TIMM, _set("pretrained_cfg.interpolation", 3),
        "pretrained_cfg.interpolation must be one of"),
    Row("input-size-text", TIMM, _set("pretrained_cfg.input_size", "abc"),
        "pretrained_cfg.input_size must be [channels, height, width] in whole numbers, got 'abc' from"),
    Row("input-size-two", TIMM, _set("pretrained_cfg.input_size", [160, 160]),
        "pretrained_cfg.input_size must be [channels, height, width]"),
    Row("input-size-fraction", TIMM, _set("pretrained_cfg.input_size", [3, 160.5, 160]),
        "pretrained_cfg.input_size must be [channels, height, width]"),
    Row("input-size-huge", TIMM, _set("pretrained_cfg.input_size", [3, 100000, 100000]),
        "input_size 100000x100000 from"),
    Row("mean-text", TIMM, _set("pretrained_cfg.mean", "abc"),
        "pretrained_cfg.mean must be a list of finite numbers, one per channel, got 'abc' from"),
    Row("std-object", TIMM, _set("pretrained_cfg.std", {"r": 0.5}), "pretrained_cfg.std must be a list of"),
    Row("std-infinite", TIMM, _set("pretrained_cfg.std", [0.5, float("inf"), 0.5]),
        "pretrained_cfg.std must be a list of finite numbers"),
    Row("crop-pct-list", TIMM, _set("pretrained_cfg.crop_pct", [0.9]),
        "pretrained_cfg.crop_pct must be a number in (0, 1], got [0.9] from"),
    Row("crop-pct-above-one", TIMM, _set("pretrained_cfg.crop_pct", 8),
        "pretrained_cfg.crop_pct must be in (0, 1], got 8 from"),
    Row("crop-mode-list", TIMM, _set("pretrained_cfg.crop_mode", ["center"]),
        "pretrained_cfg.crop_mode must be a string ('center'), got ['center'] from"),
    Row("num-classes-tera", TIMM, _set("num_classes", TERA),
        "num_classes must be at most 1,000,000 (the most classes a model may have), got 1000000000000 from"),
    Row("num-classes-text", TIMM, _set("num_classes", "abc"), "num_classes must be a whole number, got 'abc' from"),
    Row("num-classes-list", TIMM, _set("num_classes", [3]), "num_classes must be a whole number, got [3] from"),
    Row("pretrained-num-classes-tera", TIMM, _all(_drop("num_classes"), _set("pretrained_cfg.num_classes", TERA)),
        "pretrained_cfg.num_classes must be at most 1,000,000"),
    Row("label-names-number", TIMM, _set("label_names", 5),
        "label_names must be a list of class names, one for each of the 3 classes, got 5 from"),
    Row("label-names-numbers", TIMM, _set("label_names", [1, 2, 3]), "label_names must be a list of class names"),
    Row("label-names-too-few", TIMM, _set("label_names", ["cat"]),
        "label_names must be a list of class names, one for each of the 3 classes, got 1 names from"),
]  # fmt: skip

HF_CONFIG, PROCESSOR = "config.json", "preprocessor_config.json"
# ViT's processor resizes whole; with do_center_crop and a crop_size a shortest_edge resize is cropped.
SHORTEST_EDGE_CROP = _all(
    _drop("crop_pct"), _set("do_center_crop", True), _set("crop_size", {"height": 224, "width": 224})
)
HF_ROWS = [
    Row("num-labels-text", HF_CONFIG, _set("num_labels", "abc"), "num_labels must be a whole number, got 'abc' from"),
    Row("num-labels-infinite", HF_CONFIG, _set("num_labels", float("inf")),
        "num_labels must be a whole number, got inf from"),
    Row("num-labels-list", HF_CONFIG, _set("num_labels", [3]), "num_labels must be a whole number, got [3] from"),
    Row("num-labels-tera", HF_CONFIG, _set("num_labels", TERA),
        "num_labels must be at most 1,000,000 (the most classes a model may have)"),
    Row("num-labels-not-id2label", HF_CONFIG, _set("num_labels", 5),
        "num_labels must be the number of classes id2label names (3), got 5 from"),
    Row("id2label-number", HF_CONFIG, _set("id2label", 5),
        'id2label must be a JSON object of each class index ("0", "1", ...) to its name, got 5 from'),
    Row("id2label-list", HF_CONFIG, _set("id2label", list(CLASSES)), "id2label must be a JSON object"),
    Row("id2label-names-as-keys", HF_CONFIG, _set("id2label", {c: c for c in CLASSES}),
        "id2label's keys must be the class indices 0 to 2, got 'cat' from"),
    Row("id2label-index-missing", HF_CONFIG, _set("id2label", {"0": "cat", "1": "dog", "5": "fox"}),
        "id2label's keys must be the class indices 0 to 2, got '5' from"),
    Row("id2label-index-twice", HF_CONFIG, _set("id2label", {"0": "cat", "1": "dog", "01": "fox"}),
        "id2label must name each class index 0 to 2 once"),
    Row("id2label-name-number", HF_CONFIG, _set("id2label", {"0": 5, "1": "dog", "2": "fox"}),
        "id2label['0'] must be a class name (a string), got 5 from"),
    Row("rescale-factor-text", PROCESSOR, _set("rescale_factor", "abc"),
        "rescale_factor must be a finite number, got 'abc' from"),
    Row("rescale-factor-null", PROCESSOR, _set("rescale_factor", None),
        "rescale_factor must be a finite number, got None from"),
    Row("do-rescale-text", PROCESSOR, _set("do_rescale", "false"), "do_rescale must be true or false, got 'false'"),
    Row("shortest-edge-zero-crop-pct", PROCESSOR, _set("size", {"shortest_edge": 0}),
        "size.shortest_edge must be at least 1, got 0 from"),
    Row("shortest-edge-zero-crop", PROCESSOR, _all(SHORTEST_EDGE_CROP, _set("size", {"shortest_edge": 0})),
        "size.shortest_edge must be at least 1, got 0 from"),
    Row("shortest-edge-text", PROCESSOR, _set("size", {"shortest_edge": "abc"}),
        "size.shortest_edge must be a whole number, got 'abc' from"),
    Row("shortest-edge-huge", PROCESSOR, _set("size", {"shortest_edge": TERA}),
        "size.shortest_edge must be at most 4,096, got 1000000000000 from"),
    Row("size-text", PROCESSOR, _set("size", "abc"), "size must be a whole number, got 'abc' from"),
    Row("size-height-alone", PROCESSOR, _set("size", {"height": 224}), "size.width must be a whole number, got None"),
    Row("size-longest-edge", PROCESSOR, _set("size", {"longest_edge": 224}),
        "size must be {height, width}, {shortest_edge} or one number, got {'longest_edge': 224} from"),
    Row("crop-size-text", PROCESSOR, _all(SHORTEST_EDGE_CROP, _set("crop_size", {"height": "abc", "width": 224})),
        "crop_size.height must be a whole number, got 'abc' from"),
    Row("crop-size-height-alone", PROCESSOR, _all(SHORTEST_EDGE_CROP, _set("crop_size", {"height": 224})),
        "crop_size.width must be a whole number, got None from"),
    Row("do-center-crop-text", PROCESSOR, _all(SHORTEST_EDGE_CROP, _set("do_center_crop", "yes")),
        "do_center_crop must be true or false, got 'yes' from"),
    Row("crop-pct-text", PROCESSOR, _set("crop_pct", "abc"), "crop_pct must be a number in (0, 1], got 'abc' from"),
    Row("resample-list", PROCESSOR, _set("resample", [3]),
        "resample must be one of 0, 2 or 3 (PIL's nearest, bilinear, bicubic), got [3] from"),
    Row("resample-true", PROCESSOR, _set("resample", True), "resample must be one of 0, 2 or 3"),
    Row("image-mean-text", PROCESSOR, _set("image_mean", "abc"),
        "image_mean must be a list of finite numbers, one per channel, got 'abc' from"),
    Row("image-std-nan", PROCESSOR, _set("image_std", [float("nan")] * 3), "image_std must be a list of finite"),
]  # fmt: skip


def _evaluate(model: Path, data: Path, *extra: str):
    return runner.invoke(app, ["evaluate", str(model), "--data", str(data), *QUICK, *extra])


def _assert_one_line(result, exit_code: int, *fragments: str) -> None:
    """The documented exit code, and one line on stderr holding each fragment (the key, the file), no traceback."""
    assert result.exit_code == exit_code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "unexpected" not in result.stderr and "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _run_row(row: Row, built: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(built, model)
    data = json.loads((model / row.file).read_text())
    row.edit(data)
    (model / row.file).write_text(json.dumps(data))
    result = _evaluate(model, three_class_npz(tmp_path / "data.npz", n=6))
    _assert_one_line(result, row.exit_code, row.message, str(model / row.file))


@pytest.fixture(scope="module")
def timm_built(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("timm") / "model"
    timm_folder(folder, "test_resnet")
    return folder


@pytest.fixture(scope="module")
def hf_built(tmp_path_factory) -> Path:
    pytest.importorskip("transformers", reason="the hf extra (pip install -e '.[hf]')")
    folder = tmp_path_factory.mktemp("hf") / "model"
    hf_folder(folder, "convnext")
    return folder


@pytest.mark.parametrize("row", TIMM_ROWS, ids=[row.id for row in TIMM_ROWS])
def test_timm_folder_config(row: Row, timm_built: Path, tmp_path: Path) -> None:
    _run_row(row, timm_built, tmp_path)


@pytest.mark.parametrize("row", HF_ROWS, ids=[row.id for row in HF_ROWS])
def test_hugging_face_folder_config(row: Row, hf_built: Path, tmp_path: Path) -> None:
    _run_row(row, hf_built, tmp_path)


@pytest.mark.parametrize(
    "where,args,message",
    [
        ("sidecar", (), "num_classes must be at most 1,000,000 (the most classes a model may have), got "),
        ("flag", ("--num-classes", str(TERA)), "got 1000000000000 from --num-classes"),
    ],
)
def test_a_class_count_is_bounded_before_the_model_is_built(tmp_path, where, args, message):
    """A state dict's class count, from its sidecar or --num-classes: bounded before timm builds a classifier of
    that size (10**12 classes: 2 TB of weights)."""
    import timm
    from safetensors.torch import save_file

    weights = tmp_path / "net.safetensors"
    save_file(timm.create_model("test_resnet", num_classes=3).state_dict(), str(weights))
    sidecar = {"arch": "test_resnet", "num_classes": TERA if where == "sidecar" else 3}
    weights.with_suffix(".json").write_text(json.dumps(sidecar))
    result = _evaluate(weights, three_class_npz(tmp_path / "data.npz", n=6), *args)
    _assert_one_line(result, 2, message, "num_classes")


def test_a_sidecar_larger_than_the_limit_is_refused_unread(tmp_path):
    """A sidecar larger than the JSON limit (a sparse file: nothing written, nothing read beyond the limit)."""
    model = tmp_path / "net.safetensors"
    model.write_bytes(b"")
    with open(model.with_suffix(".json"), "wb") as sidecar:
        sidecar.truncate(MAX_JSON_BYTES + 1)
    result = _evaluate(model, three_class_npz(tmp_path / "data.npz", n=6), "--arch", "test_resnet")
    _assert_one_line(result, 3, f"sidecar {model.with_suffix('.json')}: larger than 64 MiB")


# ------------------------------------------------------------------------------------ OpenCLIP prompts


def _prompts(templates: list[str]) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.write_text(json.dumps({"classes": list(CLASSES), "templates": templates}))
        return path

    return make


def _sparse(path: Path) -> Path:
    with open(path, "wb") as file:
        file.truncate(MAX_JSON_BYTES + 1)
    return path


def _nested(path: Path) -> Path:
    path.write_text("[" * 100_000 + "]" * 100_000)
    return path


def _many_classes(path: Path) -> Path:
    path.write_text(json.dumps({"classes": [f"c{i}" for i in range(1_000_001)]}))
    return path


TEMPLATE = "must hold {} once, where the class name goes, and no other brace"
PROMPT_ROWS = [
    ("two-placeholders", _prompts(["a {} and a {}"]), f"template 'a {{}} and a {{}}' {TEMPLATE}"),
    ("numbered-field", _prompts(["a photo of a {}.", "a {} {0}"]), f"template 'a {{}} {{0}}' {TEMPLATE}"),
    ("unclosed-brace", _prompts(["a {} {"]), f"template 'a {{}} {{' {TEMPLATE}"),
    ("attribute-field", _prompts(["a {} {.__class__}"]), f"template 'a {{}} {{.__class__}}' {TEMPLATE}"),
    ("endless-device", lambda path: Path("/dev/zero"), "--class-prompts /dev/zero: not a regular file"),
    ("larger-than-the-limit", _sparse, ": larger than 64 MiB, the most a model's JSON file may hold"),
    ("nested-arrays", _nested, "nested too deeply"),
    ("a-million-and-one-classes", _many_classes, "names 1,000,001 classes, more than the 1,000,000 a model may have"),
]


@pytest.fixture(scope="module")
def clip_weights(tmp_path_factory) -> Path:
    pytest.importorskip("open_clip", reason="the clip extra (pip install -e '.[clip]')")
    weights = tmp_path_factory.mktemp("clip") / "clip.pt"
    tiny_clip(weights)
    return weights


@pytest.mark.parametrize("make,message", [row[1:] for row in PROMPT_ROWS], ids=[row[0] for row in PROMPT_ROWS])
def test_class_prompts(make, message, clip_weights: Path, tmp_path: Path) -> None:
    """Templates are filled by substitution, never str.format (whose fields read the name's items and
    attributes); the file is read up to the JSON limit, and only a regular file is read."""
    prompts = make(tmp_path / "prompts.json")
    data = three_class_npz(tmp_path / "data.npz", n=6)
    result = _evaluate(clip_weights, data, "--arch", f"open_clip:{TINY_CLIP}", "--class-prompts", str(prompts))
    _assert_one_line(result, 2, message, f"--class-prompts {prompts}")  # a file an option names


def test_a_template_takes_the_class_name_as_it_is(tmp_path: Path) -> None:
    """A class name with braces in it is put in the template as written (substitution, not formatting)."""
    from macs_audit.models.open_clip import fill, read_class_prompts

    prompts = tmp_path / "prompts.json"
    prompts.write_text(json.dumps({"classes": ["{0}", "a {}"], "templates": ["a photo of a {}."]}))
    classes, templates = read_class_prompts(prompts)
    assert [fill(templates[0], name) for name in classes] == ["a photo of a {0}.", "a photo of a a {}."]


def test_an_id2label_of_more_classes_than_the_limit_is_refused_before_it_is_read():
    from macs_audit.errors import UsageError
    from macs_audit.models.config import MAX_CLASSES
    from macs_audit.models.huggingface import label_names

    with pytest.raises(UsageError, match="id2label must name 2 to 1,000,000 classes, got 1,000,001 from config.json"):
        label_names(dict.fromkeys(map(str, range(MAX_CLASSES + 1)), "x"), "config.json")
