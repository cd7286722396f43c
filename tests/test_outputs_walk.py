"""The comparison through links of an existing output with an input folder's files lists at most
outputs.MAX_LINK_ENTRIES entries of the folder (an ImageNet train tree is not listed on every rerun)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from macs_audit import outputs
from macs_audit.errors import UsageError


def _tree(root: Path, folders: int, files: int) -> None:
    for f in range(folders):
        (root / f"c{f}").mkdir(parents=True)
        for i in range(files):
            (root / f"c{f}" / f"{i}.png").write_bytes(b"x")


def test_a_link_in_a_small_folder_is_found(tmp_path: Path) -> None:
    _tree(tmp_path / "data", 3, 4)
    (tmp_path / "out.json").write_text("{}")
    os.symlink(tmp_path / "out.json", tmp_path / "data" / "c1" / "linked.png")
    with pytest.raises(UsageError, match="would replace the input .*linked.png"):
        outputs.check_file(tmp_path / "out.json", inputs=[tmp_path / "data"])


def test_a_large_folder_is_listed_only_up_to_the_bound(tmp_path: Path, monkeypatch) -> None:
    _tree(tmp_path / "data", 5, 20)
    (tmp_path / "out.json").write_text("{}")
    listed = []
    scandir = os.scandir

    def counting(path):  # counts the entries the walk takes from each listing
        class Listing:
            def __init__(self) -> None:
                self.inner = scandir(path)

            def __enter__(self):
                return self

            def __exit__(self, *exc) -> None:
                self.inner.close()

            def __iter__(self):
                for entry in self.inner:
                    listed.append(entry.name)
                    yield entry

        return Listing()

    monkeypatch.setattr(outputs.os, "scandir", counting)
    monkeypatch.setattr(outputs, "MAX_LINK_ENTRIES", 12)
    outputs.check_file(tmp_path / "out.json", inputs=[tmp_path / "data"])
    assert 0 < len(listed) <= 12  # of 105 entries
