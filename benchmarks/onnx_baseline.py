"""The floor of a clean ONNX audit: load the built-in test set, normalise, run the model, accuracy and ECE.

    python benchmarks/onnx_baseline.py MODEL.onnx [DATA.npz]

Mean and std come from the model's sidecar JSON; ECE uses 15 equal-width bins (lo, hi], as the
audit does. benchmarks/bench_startup.py times `macs-audit evaluate` against this script.
"""

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

model = Path(sys.argv[1])
data = np.load(sys.argv[2] if len(sys.argv) > 2 else Path(__file__).parents[1] / "macs_audit/assets/cifar10_test.npz")
meta = json.loads(model.with_suffix(".json").read_text())
x = (data["x"].astype(np.float32) / 255 - np.float32(meta["mean"])) / np.float32(meta["std"])
x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
name = session.get_inputs()[0].name
logits = np.concatenate([session.run(None, {name: x[i : i + 500]})[0] for i in range(0, len(x), 500)])
logits = logits.astype(np.float64)
p = np.exp(logits - logits.max(1, keepdims=True))
p /= p.sum(1, keepdims=True)
confidence, correct = p.max(1), p.argmax(1) == data["y"]
bins = np.clip(np.ceil(confidence * 15).astype(int) - 1, 0, 14)
ece = sum(abs(correct[bins == b].mean() - confidence[bins == b].mean()) * (bins == b).mean() for b in np.unique(bins))
print(f"accuracy {correct.mean():.4f} ece {ece:.4f}")
