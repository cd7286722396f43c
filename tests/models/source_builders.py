"""Builders shared by the model-source tests: real photographs (scikit-image's sample images) in an image folder,
and each source's tiny model with random weights, written as its library writes it. Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CLASSES = ("cat", "dog", "fox")
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket")  # 512x512, 300x451, 400x600, 427x640
QUICK = ("--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "--calibration-split", "0")
QUICK = (*QUICK, "--calibrators", "none", "--corruptions", "none", "-q")


def photographs() -> dict[str, np.ndarray]:
    """uint8 RGB photographs of several sizes and aspect ratios."""
    import skimage.data

    return {name: getattr(skimage.data, name)() for name in PHOTOS}


def photo_folder(root: Path) -> tuple[Path, list[np.ndarray]]:
    """An image folder of the photographs and their mirror images under CLASSES (two a class), and the images in
    the order the folder's source reads them (classes sorted, files sorted)."""
    from PIL import Image

    photos = list(photographs().values())
    images = [*photos, *(p[:, ::-1] for p in photos[:2])]
    ordered = []
    for i, image in enumerate(images):
        cls = CLASSES[i % len(CLASSES)]
        (root / cls).mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.ascontiguousarray(image)).save(root / cls / f"{i}.png")
    for cls in CLASSES:
        for i, image in enumerate(images):
            if CLASSES[i % len(CLASSES)] == cls:
                ordered.append(np.ascontiguousarray(image))
    return root, ordered


def hf_folder(folder: Path, processor: str = "convnext"):
    """A tiny transformers ResNet classifier saved with save_pretrained, with an image processor: ConvNeXt's
    (shortest edge 224, crop_pct 0.875, bicubic) or ViT's (224x224 whole, bilinear). Returns (model, processor)."""
    from transformers import ConvNextImageProcessor, ResNetConfig, ResNetForImageClassification, ViTImageProcessor

    id2label = dict(enumerate(CLASSES))
    config = ResNetConfig(
        embedding_size=8,
        hidden_sizes=[8, 16],
        depths=[1, 1],
        num_labels=len(CLASSES),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
    )
    model = ResNetForImageClassification(config).eval()
    model.save_pretrained(str(folder))
    if processor == "convnext":
        image_processor = ConvNextImageProcessor(size={"shortest_edge": 224}, crop_pct=0.875)
    else:
        image_processor = ViTImageProcessor()
    image_processor.save_pretrained(str(folder))
    return model, image_processor


def timm_folder(folder: Path, arch: str = "resnet18"):
    """A timm model saved by timm's save_for_hf (config.json with pretrained_cfg, model.safetensors)."""
    import timm
    from timm.models import save_for_hf

    model = timm.create_model(arch, pretrained=False, num_classes=len(CLASSES)).eval()
    save_for_hf(model, str(folder), model_config={"label_names": list(CLASSES)})
    return model


def torchvision_weights(path: Path, name: str = "resnet18"):
    import torch
    import torchvision

    model = torchvision.models.get_model(name, weights=None, num_classes=len(CLASSES)).eval()
    torch.save(model.state_dict(), path)
    return model


def exported_program(path: Path, batch: int | None = None):
    """A small conv net exported with torch.export at 32x32 (a dynamic batch unless `batch`) and saved as .pt2."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()
    )
    model = torch.nn.Sequential(*model, torch.nn.Linear(8, 3)).eval()
    dims = None if batch else ({0: torch.export.Dim("batch", min=1)},)
    program = torch.export.export(model, (torch.zeros(batch or 2, 3, 32, 32),), dynamic_shapes=dims)
    torch.export.save(program, str(path))
    return model


TINY_CLIP = "macs-test-tiny-clip"


def tiny_clip(path: Path, prompts: Path | None = None):
    """The smallest OpenCLIP model (one layer a tower, registered as TINY_CLIP) with random weights saved at
    `path`, and its --class-prompts file. Returns (model, tokenizer)."""
    import open_clip
    import torch

    config = path.parent / f"{TINY_CLIP}.json"
    config.write_text(
        json.dumps(
            {
                "embed_dim": 16,
                "vision_cfg": {"image_size": 64, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
                "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
            }
        )
    )
    open_clip.add_model_config(config)
    torch.manual_seed(0)
    model = open_clip.create_model(TINY_CLIP, pretrained=None).eval()
    torch.save(model.state_dict(), path)
    if prompts is not None:
        templates = ["a photo of a {}.", "a {} in the wild"]
        prompts.write_text(json.dumps({"classes": list(CLASSES), "templates": templates}))
    return model, open_clip.get_tokenizer(TINY_CLIP)


def audit_logits(model: Path | str, data: Path, out: Path, *extra: str) -> tuple[np.ndarray, dict]:
    """`macs-audit evaluate MODEL --data DATA` through the CLI (fast options): the logits it saved and its report."""
    from typer.testing import CliRunner

    from macs_audit.cli import app

    report, predictions = out / "report.json", out / "predictions.npz"
    args = ["evaluate", str(model), "--data", str(data), *QUICK, "-o", str(report)]
    args += ["--save-predictions", str(predictions)]
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == 0, result.output
    return np.load(predictions)["logits"], json.loads(report.read_text())


def three_class_npz(path: Path, n: int = 60, size: int = 40) -> Path:
    """A small labelled npz of random images in CLASSES (its class names say which)."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    np.savez(path, x=x, y=np.arange(n) % len(CLASSES), class_names=np.array(CLASSES))
    return path


def run_cli(*args: str | Path) -> None:
    """A macs-audit command through the CLI, which must succeed."""
    from typer.testing import CliRunner

    from macs_audit.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output


AUDIT_QUICK = ("--bootstrap", "0", "--perturbations", "none", "--sensitivity-samples", "0", "-q")
