"""A CIFAR ResNet-18 as an ONNX file with the metadata `evaluate` reads, for the benchmarks that need a model
of the size users ship (bench_parity.py --model): timm's resnet18 with the CIFAR stem (a 3x3 stride-1 first
convolution, no max-pool; 11 M parameters, about 0.56 GFLOPs an image at 32 px), 10 classes, weights drawn at
random from a fixed seed (nothing is downloaded; the benchmarks time it, they do not read its accuracy).

    python benchmarks/make_resnet18_cifar.py OUT.onnx
"""

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()

    import timm
    import torch

    from macs_audit.models.config import CIFAR10_MEAN, CIFAR10_STD
    from macs_audit.models.export import export_onnx

    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10)
    model.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = torch.nn.Identity()
    meta = {"arch": "resnet18", "num_classes": 10, "input_size": (32, 32), "output": "logits"}
    export_onnx(model, args.out, meta | {"mean": list(CIFAR10_MEAN), "std": list(CIFAR10_STD)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
