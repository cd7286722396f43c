"""Write the validation split that `macs-audit finetune` holds out of a training set, as an npz any command reads.

    python scripts/validation_split.py TRAIN OUT.npz [--val-fraction 0.1] [--split-seed 0]

TRAIN is any data source the tool reads (an npz, a CIFAR python-batches directory with --split train, an
image folder). With finetune's defaults (--val-fraction 0.1 --split-seed 0) on the CIFAR-10 training set
this is the 5,000 images the sample models were never trained on: data to fit a calibrator on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from macs_audit.atomic import atomic_path
from macs_audit.data.sources import load_source
from macs_audit.finetune.options import FinetuneOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("train", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--split", default="train", help="split of a CIFAR python-batches directory")
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--split-seed", type=int, default=0)
    args = parser.parse_args()
    source = load_source(args.train, split=args.split)
    labels = np.asarray(source.labels, dtype=np.int64)
    held_out, _ = FinetuneOptions(val_fraction=args.val_fraction, split_seed=args.split_seed).split(labels)
    with atomic_path(args.out) as tmp, open(tmp, "wb") as handle:
        np.savez(handle, x=source.images(held_out), y=labels[held_out], class_names=np.array(source.class_names))
    print(f"{len(held_out):,} of {len(labels):,} images -> {args.out}")


if __name__ == "__main__":
    main()
