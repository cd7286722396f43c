"""Which released layout a --corrupted-data folder holds, and its images as views of the clean data: the
CIFAR-C `.npy` files (data.npy_layout) or the ImageNet-C / Tiny-ImageNet-C image tree (data.image_tree).
The audit checks a folder's files before the model loads (`check_released_files`), the folder against the
clean data before the clean pass (`check_released_matches`), and reads each grid cell (`released_source`)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from macs_audit.data import image_tree
from macs_audit.data.npy_layout import check_cifar_c, cifar_c_source


def check_released_files(directory: str | os.PathLike, corruptions: Iterable[str], severities: Iterable[int]) -> None:
    """Fail before the model loads when the corrupted-data folder (either layout) lacks a requested corruption
    or severity or holds an empty folder. Reads headers and folder listings only."""
    names = list(corruptions)
    if image_tree.is_image_tree(directory):
        image_tree.check_image_tree(directory, names, list(severities))
    else:
        check_cifar_c(directory, names)


def check_released_matches(
    directory: str | os.PathLike, corruptions: Iterable[str], severities: Iterable[int], clean_source
) -> None:
    """Fail before the clean pass when the corrupted-data folder (either layout) was made from other data than
    `clean_source` or names other classes; its files are checked by `check_released_files`."""
    names, sevs = list(corruptions), list(severities)
    if not names or not sevs:
        return
    if image_tree.is_image_tree(directory):
        image_tree.check_tree_classes(directory, names, sevs, clean_source.class_names)
        image_tree.tree_source(directory, clean_source, names[0], sevs[0])  # raises when not the data's images
    else:
        cifar_c_source(directory, clean_source, names[0], 1)  # raises when the folder does not match the data


def released_source(directory: str | os.PathLike, clean_source, name: str, severity: int):
    """The released images of one corruption x severity, aligned with `clean_source`, from either layout."""
    if image_tree.is_image_tree(directory):
        return image_tree.tree_source(directory, clean_source, name, severity)
    return cifar_c_source(directory, clean_source, name, severity)
