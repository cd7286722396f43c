"""The floor of the default audit: its three inference passes and nothing else, in a bare script.

    python benchmarks/onnx_default_passes.py MODEL.onnx [DATA.npz]

The passes of `macs-audit evaluate MODEL` (the README's first command), on the same inputs:
- clean: the built-in 10,000 test images, normalised with the sidecar's mean and std, batches of 500;
- noise+blur: the same images through the audit's own perturbation (macs_audit.views.perturbations, torch,
  seeded per batch as the audit seeds it: the same bytes), batches of 500;
- sensitivity: the audit's 500 class-stratified images, 17 passes each (the images and 8 random unit
  directions, plus and minus a step of 1e-2), batches of 256.
No metrics beyond each pass's accuracy. Each pass's seconds go to stderr (`pass NAME SECONDS`), for
benchmarks/bench_startup.py's breakdown.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

began = time.perf_counter()
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
model = Path(sys.argv[1])
data = np.load(sys.argv[2] if len(sys.argv) > 2 else ROOT / "macs_audit/assets/cifar10_test.npz")
images, labels = data["x"], data["y"]
meta = json.loads(model.with_suffix(".json").read_text())
mean = np.asarray(meta["mean"], dtype=np.float32).reshape(1, 3, 1, 1)
std = np.asarray(meta["std"], dtype=np.float32).reshape(1, 3, 1, 1)
session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
name = session.get_inputs()[0].name


def unit(batch: np.ndarray) -> np.ndarray:
    """uint8 NHWC to float32 [0, 1] NCHW."""
    x = np.ascontiguousarray(batch.transpose(0, 3, 1, 2), dtype=np.float32)
    x *= np.float32(1 / 255)  # the audit's scale (macs_audit.pixels.UNIT_SCALE)
    return x


def predict(x: np.ndarray) -> np.ndarray:
    return session.run(None, {name: (x - mean) / std})[0]


def timed(label: str, started: float) -> None:
    print(f"pass {label} {time.perf_counter() - started:.3f} s", file=sys.stderr)


timed("start-up", began)
start = time.perf_counter()
clean = np.concatenate([predict(unit(images[i : i + 500])) for i in range(0, len(images), 500)])
timed("clean", start)

start = time.perf_counter()
import torch  # noqa: E402  (the perturbation's own library, imported when its pass begins, as the audit does)

from macs_audit.seeding import derive_seed  # noqa: E402
from macs_audit.views.perturbations import evaluation_view  # noqa: E402

perturbed = []
for i in range(0, len(images), 500):
    generator = torch.Generator().manual_seed(derive_seed("perturbation", 0, "noise+blur", i))
    x = evaluation_view("noise+blur", torch.from_numpy(unit(images[i : i + 500])), generator).numpy()
    perturbed.append(predict(x))
timed("noise+blur", start)

start = time.perf_counter()
from macs_audit.data.splits import stratified_subset  # noqa: E402

subset = stratified_subset(labels, 500, 0)
x_all, y_all = unit(images[subset]), labels[subset]
right = 0
for i in range(0, len(subset), 256):
    x = x_all[i : i + 256]
    rng = np.random.default_rng(derive_seed("sensitivity", 0, i))
    right += int((predict(x).argmax(1) == y_all[i : i + 256]).sum())
    for _ in range(8):
        u = rng.standard_normal(x.shape).astype(np.float32)
        u /= np.linalg.norm(u.reshape(len(x), -1), axis=1).reshape(len(x), 1, 1, 1)
        predict(x + 1e-2 * u)
        predict(x - 1e-2 * u)
timed("sensitivity", start)
accuracy = [float((z.argmax(1) == labels).mean()) for z in (clean, np.concatenate(perturbed))]
print(f"accuracy clean {accuracy[0]:.4f} noise+blur {accuracy[1]:.4f} sensitivity subset {right / len(subset):.4f}")
