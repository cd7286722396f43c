"""Publish the experiment's MaCS model (seed 0, chosen defaults) as sample_models/resnet9_c10_macs.*

    python experiments/finetune_cifar10/make_sample_model.py
    macs-audit evaluate sample_models/resnet9_c10_macs.onnx -o sample_models/resnet9_c10_macs.audit.json

The weights are those of the run `macs_s0` of run.py (no retraining); the sidecar records its
options and the start model's hash. The same model comes from the CLI (up to float rounding
from the thread count):

    macs-audit finetune sample_models/resnet9_c10_ce.safetensors --data cifar10_train.npz \\
        --out runs/macs --epochs 1 --seed 0 --device cpu   (with the chosen MaCS defaults)
"""

import json
from pathlib import Path

from safetensors.torch import load_file

from macs_audit.models.backend import file_sha256
from macs_audit.models.export import export_onnx, save_safetensors, write_sidecar
from macs_audit.models.torch import build_timm_model

ROOT = Path(__file__).resolve().parents[2]
RUN = json.loads((ROOT / "experiments/finetune_cifar10/results/runs/macs_s0.json").read_text())
WEIGHTS = ROOT / "runs/finetune_cifar10/models/macs_s0.safetensors"
START = ROOT / "sample_models/resnet9_c10_ce.safetensors"
OUT = ROOT / "sample_models/resnet9_c10_macs"


def main() -> None:
    start_meta = json.loads(START.with_suffix(".json").read_text())
    meta = {k: start_meta[k] for k in ("arch", "num_classes", "input_size", "mean", "std", "output", "class_names")}
    model = build_timm_model(meta["arch"], meta["num_classes"], load_file(str(WEIGHTS))).eval()
    save_safetensors(model, OUT.with_suffix(".safetensors"))
    options = RUN["options"]
    write_sidecar(
        OUT.with_suffix(".json"),
        {
            **meta,
            "finetune": {
                "objective": "macs",
                "from": START.name,
                "from_sha256": file_sha256(START),
                "options": {k: v for k, v in options.items() if k not in ("device", "eval_batch_size")},
                "steps": RUN["history"][-1]["step"],
                "experiment": "experiments/finetune_cifar10 (run macs_s0)",
                "test": {k: RUN["clean"][k] for k in ("accuracy", "ece", "nll")},
            },
        },
    )
    export_onnx(model, OUT.with_suffix(".onnx"), meta)
    print(f"wrote {OUT}.safetensors, .json, .onnx")


if __name__ == "__main__":
    main()
