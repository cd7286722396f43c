"""Publish the experiment's MaCS model (seed 0, the shipped defaults) as sample_models/resnet9_c10_macs.*

    python experiments/finetune_cifar10/make_sample_model.py
    macs-audit evaluate sample_models/resnet9_c10_macs.onnx -o sample_models/resnet9_c10_macs.audit.json

The weights are those of the run `macs_s0` of run.py (no retraining) with the run's validation
temperature folded into the classifier, as `finetune` ends by default; the sidecar records the
options, the temperature and the start model's hash. The same model comes from the CLI (up to float
rounding from the thread count):

    macs-audit finetune sample_models/resnet9_c10_ce.safetensors --data cifar10_train.npz \\
        --out runs/macs --seed 0 --device cpu
"""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from macs_audit.models.backend import file_sha256
from macs_audit.models.calibrated_torch import fold_temperature_torch
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
    trained = build_timm_model(meta["arch"], meta["num_classes"], load_file(str(WEIGHTS)))[0].eval()
    t = RUN["temperature"]
    model, folded_into = fold_temperature_torch(trained, t, torch.rand(4, 3, *meta["input_size"]))
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
                "temperature": t,
                "test": {k: RUN["clean_after_t"][k] for k in ("accuracy", "ece", "nll")},
            },
            "calibration": {
                "method": "temperature",
                "temperature": t,
                "fit_data": "the validation split held out of the training data",
                "folded_into": folded_into,
            },
        },
    )
    export_onnx(model, OUT.with_suffix(".onnx"), meta)
    print(f"wrote {OUT}.safetensors, .json, .onnx")


if __name__ == "__main__":
    main()
