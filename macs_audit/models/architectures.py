"""Project architectures, registered in timm's model registry.

Importing this module registers them, so `timm.create_model("macs_resnet9_c10")` and
`--arch macs_resnet9_c10` resolve like any timm model. The torch backend imports it
before calling timm.create_model.
"""

import torch
from timm.models import register_model
from torch import nn


def _conv_bn(in_ch: int, out_ch: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1, bias=False),
        nn.BatchNorm2d(out_ch),
        nn.ReLU(inplace=True),
    )


class Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(_conv_bn(channels, channels), _conv_bn(channels, channels))

    def forward(self, x):
        return x + self.body(x)


class CifarResNet9(nn.Module):
    """The ResNet-9 of the DAWNBench CIFAR-10 entries (Page, 2018), with configurable widths.

    prep conv -> [conv, pool, residual] -> [conv, pool] -> [conv, pool, residual] -> max pool -> linear.
    Widths (16, 32, 64, 128) give ~0.4 M parameters and ~25 M multiply-adds per 32x32 image,
    small enough to train on two CPU cores.
    """

    def __init__(self, num_classes: int = 10, widths=(16, 32, 64, 128), in_chans: int = 3, **kwargs):
        super().__init__()
        w0, w1, w2, w3 = widths
        self.num_classes = num_classes
        self.features = nn.Sequential(
            _conv_bn(in_chans, w0),
            _conv_bn(w0, w1),
            nn.MaxPool2d(2),
            Residual(w1),
            _conv_bn(w1, w2),
            nn.MaxPool2d(2),
            _conv_bn(w2, w3),
            nn.MaxPool2d(2),
            Residual(w3),
            nn.AdaptiveMaxPool2d(1),
            nn.Flatten(),
        )
        self.fc = nn.Linear(w3, num_classes, bias=False)
        # A fixed logit scale as in the DAWNBench net: keeps the initial logits small.
        self.logit_scale = 0.125

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x)) * self.logit_scale

    def feature_head(self) -> tuple[str, torch.Tensor, None]:
        """The features' layer and the map to the logits (models/features.py): fc's input, fc's weight times the
        logit scale."""
        return "fc", self.fc.weight * self.logit_scale, None


def _resnet9(name: str, widths: tuple[int, ...], pretrained: bool, num_classes: int, **kwargs) -> CifarResNet9:
    """A CifarResNet-9 of `widths` as timm builds a registered model (its pretrained-config keys dropped)."""
    if pretrained:
        raise ValueError(f"{name} has no pretrained weights; load a checkpoint instead")
    kwargs.pop("pretrained_cfg", None)
    kwargs.pop("pretrained_cfg_overlay", None)
    return CifarResNet9(num_classes=num_classes, widths=widths, **kwargs)


@register_model
def macs_resnet9_c10(pretrained: bool = False, num_classes: int = 10, **kwargs) -> CifarResNet9:
    """Quarter-width CIFAR ResNet-9 (~0.4 M parameters), the sample model's architecture."""
    return _resnet9("macs_resnet9_c10", (16, 32, 64, 128), pretrained, num_classes, **kwargs)


@register_model
def macs_resnet9_wide_c10(pretrained: bool = False, num_classes: int = 10, **kwargs) -> CifarResNet9:
    """Half-width CIFAR ResNet-9 (~1.6 M parameters)."""
    return _resnet9("macs_resnet9_wide_c10", (32, 64, 128, 256), pretrained, num_classes, **kwargs)
