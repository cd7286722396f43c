"""Atomic writes: the old file or the new one, never half; ordinary permissions; no temporary left."""

import os
import stat

import pytest

from macs_audit.atomic import atomic_path, write_text


def test_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "report.json"
    write_text(target, "old")
    write_text(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in target.parent.iterdir()] == ["report.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "report.json"
    write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_new_files_get_the_umask_mode_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
        os.umask(0o077)
        write_text(tmp_path / "b.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o600
