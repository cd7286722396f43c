"""Each model source audited by the CLI against the library's own evaluation loop on the same images, and
the start-up cost of each optional extra's import.

    python benchmarks/bench_sources.py [--copies 12]

The images: scikit-image's four sample photographs and their mirror images, `--copies` times over (48 by
default), as PNG files in an image folder of three classes. Each source's model is the tests' tiny one
(tests/models/source_builders.py: random weights, built and saved as its library saves it). For each:
- audit:  `macs-audit evaluate MODEL --data FOLDER` with the clean view only (no bootstrap, perturbations,
          sensitivity, calibration split or calibrators), run in this process through the CLI's own entry
          point once the libraries are imported, so that the interpreter's start-up is not counted twice;
- loop:   the library's own evaluation: each file opened with PIL, its transform (the image processor, timm's
          eval transform, torchvision's Resize/CenterCrop/Normalize, OpenCLIP's preprocess), batches of
          16, the model's forward under no_grad.
One run each, side by side (the audit also decodes the files, hashes the weights, and computes its
metrics and report). Then each extra's import in a fresh interpreter (`python -c "import X"` less
`python -c "pass"`, median of 3). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "models"))

import numpy as np  # noqa: E402
import source_builders as ms  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

BATCH = 16


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def audit(model: Path, data: Path, *extra: str | Path) -> float:
    from typer.testing import CliRunner

    from macs_audit.cli import app

    args = ["evaluate", str(model), "--data", str(data), *ms.QUICK, "--batch-size", str(BATCH), "--workers", "0"]
    extra = tuple(str(e) for e in extra)
    start = time.perf_counter()
    result = CliRunner().invoke(app, [*args, *extra])
    wall = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    return wall


def loop(model, transform, files) -> float:
    """The library's loop, the files' decoding included (as the audit's own)."""

    def run() -> None:
        with torch.no_grad():
            for s in range(0, len(files), BATCH):
                model(transform([Image.open(f).convert("RGB") for f in files[s : s + BATCH]]))

    return timed(run)


def import_cost(module: str) -> float:
    def once(code: str) -> float:
        return timed(lambda: subprocess.run([sys.executable, "-c", code], check=True, capture_output=True))

    return statistics.median(once(f"import {module}") - once("pass") for _ in range(3))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=6)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    photos = list(ms.photographs().values())
    arrays = [np.ascontiguousarray(p[:, ::-1] if k % 2 else p) for k in range(2 * args.copies) for p in photos]
    data = tmp / "photos"
    for i, image in enumerate(arrays):
        folder = data / ms.CLASSES[i % len(ms.CLASSES)]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / f"{i:03d}.png")
    images = sorted(data.rglob("*.png"))
    rows = []

    model, processor = ms.hf_folder(tmp / "hf", "vit")
    rows.append(
        (
            "Hugging Face folder (tiny ResNet, ViT processor)",
            audit(tmp / "hf", data),
            loop(lambda x: model(pixel_values=x), lambda b: processor(b, return_tensors="pt")["pixel_values"], images),
        )
    )

    from timm.data import create_transform, resolve_data_config

    timm_model = ms.timm_folder(tmp / "timm")
    timm_transform = create_transform(**resolve_data_config({}, model=timm_model))
    rows.append(
        (
            "timm folder (resnet18, 224 px, crop 0.95)",
            audit(tmp / "timm", data),
            loop(timm_model, lambda b: torch.stack([timm_transform(i) for i in b]), images),
        )
    )

    import torchvision.transforms as T

    tv_model = ms.torchvision_weights(tmp / "tv.pt")
    imagenet = ("0.485,0.456,0.406", "0.229,0.224,0.225")
    tv_transform = T.Compose(
        [T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
    )
    flags = ("--arch", "torchvision:resnet18", "--input-size", "224", "--crop-pct", "0.875")
    flags += ("--interpolation", "bilinear")  # torchvision's Resize
    rows.append(
        (
            "torchvision:resnet18 (224 px, crop 0.875)",
            audit(tmp / "tv.pt", data, *flags, "--mean", imagenet[0], "--std", imagenet[1]),
            loop(tv_model, lambda b: torch.stack([tv_transform(i) for i in b]), images),
        )
    )

    pt2_model = ms.exported_program(tmp / "net.pt2")
    small = T.Compose([T.Resize((32, 32)), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)])
    rows.append(
        (
            "torch.export .pt2 (small conv net, 32 px)",
            audit(tmp / "net.pt2", data, "--mean", "0.5,0.5,0.5", "--std", "0.25,0.25,0.25"),
            loop(pt2_model, lambda b: torch.stack([small(i) for i in b]), images),
        )
    )

    import open_clip

    clip, tokenizer = ms.tiny_clip(tmp / "clip.pt", tmp / "p.json")
    preprocess = open_clip.image_transform(clip.visual.image_size, is_train=False)
    with torch.no_grad():
        prompts = tokenizer([f"a photo of a {c}." for c in ms.CLASSES])
        text = torch.nn.functional.normalize(clip.encode_text(prompts), dim=-1)

    def zero_shot(x):
        return clip.logit_scale.exp() * torch.nn.functional.normalize(clip.encode_image(x), dim=-1) @ text.T

    rows.append(
        (
            "OpenCLIP zero-shot (tiny, 64 px)",
            audit(tmp / "clip.pt", data, "--arch", f"open_clip:{ms.TINY_CLIP}", "--class-prompts", tmp / "p.json"),
            loop(zero_shot, lambda b: torch.stack([preprocess(i) for i in b]), images),
        )
    )

    print(f"{len(images)} images, batches of {BATCH}, torch threads {torch.get_num_threads()}\n")
    print("| source | audit (s) | library loop (s) | ratio |\n|---|---|---|---|")
    for name, ours, theirs in rows:
        print(f"| {name} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.1f}x |")
    print("\n| import (fresh interpreter, less its start) | start-up (s) |\n|---|---|")
    imports = (
        "torch",
        "timm",
        "torchvision",
        "transformers; transformers.AutoModelForImageClassification",  # transformers imports lazily
        "open_clip",
        "macs_audit.models.onnx",  # the ONNX path: no torch
    )
    for code in imports:
        print(f"| `import {code}` | {import_cost(code):.2f} |")


if __name__ == "__main__":
    main()
