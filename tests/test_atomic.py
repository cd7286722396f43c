"""Atomic writes: the old file or the new one, never half; ordinary permissions; no temporary left."""

import errno
import os
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest

from macs_audit.atomic import (
    atomic_path,
    destination,
    remove_stale_temporaries,
    temporary_pattern,
    write_bytes,
    write_text,
)
from macs_audit.errors import OutputError, UsageError


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


# ------------------------------------------------------------------------------ what a path names


def test_a_symlink_is_written_through_to_its_target(tmp_path):
    real = tmp_path / "real" / "report.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real"]
    assert [p.name for p in real.parent.iterdir()] == ["report.json"]  # the temporary lived beside the target


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "made.json")
    write_text(link, "x")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "x"


def test_a_fifo_is_streamed_to_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(timeout=10)
    assert received == [b"through the pipe"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def _null_device(tmp_path):
    """A character device to write to: a private copy of /dev/null where this process may make one."""
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (OSError, AttributeError):
        return Path("/dev/null")
    return node


def test_a_character_device_is_streamed_to_not_replaced(tmp_path):
    device = _null_device(tmp_path)
    before = os.lstat(device)
    write_text(device, "discarded")
    after = os.lstat(device)
    assert stat.S_ISCHR(after.st_mode) and after.st_ino == before.st_ino
    assert not any(p.name.endswith(".tmp") for p in device.parent.iterdir())


def test_dash_and_dev_stdout_mean_standard_output(capsysbinary):
    write_text("-", "to stdout\n")
    write_bytes("/dev/stdout", b"\x00binary\n")
    assert capsysbinary.readouterr().out == b"to stdout\n\x00binary\n"
    assert not Path("-").exists()
    assert destination("-").describe() == "standard output"


def test_a_directory_is_a_one_line_usage_error(tmp_path):
    with pytest.raises(UsageError, match=r"is a directory; name a file"):
        write_text(tmp_path, "x")
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------- OS errors name the user's path


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EPERM, errno.EACCES])
def test_a_failed_rename_names_the_users_path_not_the_temporary(tmp_path, monkeypatch, code):
    target = tmp_path / "report.json"

    def refuse(src, dst):
        raise OSError(code, os.strerror(code), str(src), None, str(dst))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OutputError) as info:
        write_text(target, "x")
    message = str(info.value)
    assert message.startswith(f"cannot write {target}: {os.strerror(code)}") and ".tmp" not in message
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_while_writing_names_the_users_path(tmp_path):
    target = tmp_path / "preds.npz"
    with pytest.raises(OutputError, match=rf"^cannot write {target}: No space left on device \(free some space"):
        with atomic_path(target):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # a write() to a full disk names no file
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_folder_names_the_users_path(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(tmp_path / ".report.json.abcdefgh.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OutputError, match=r"report.json: Read-only file system \(choose a folder"):
        write_text(tmp_path / "report.json", "x")


def test_other_errors_inside_the_block_pass_through(tmp_path):
    with pytest.raises(FileNotFoundError):
        with atomic_path(tmp_path / "out.npy"):
            open(tmp_path / "missing-input.png", "rb")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ stale temporaries


def test_only_stale_temporaries_of_the_writers_naming_are_removed(tmp_path):
    old = time.time() - 3600
    stale = tmp_path / ".fog.npy.ab_d12x9.tmp"
    kept = {
        "fresh": tmp_path / ".fog.npy.zz0011yy.tmp",  # newer than the run: maybe another writer's
        "other output": tmp_path / ".notes.txt.ab_d12x9.tmp",  # not one of the names given
        "other naming": tmp_path / "fog.npy.tmp",
        "upper case": tmp_path / ".fog.npy.ABCDEFGH.tmp",
        "too short": tmp_path / ".fog.npy.abc.tmp",
        "the output": tmp_path / "fog.npy",
    }
    for path in (stale, *kept.values()):
        path.write_bytes(b"x")
        os.utime(path, (old, old))
    os.utime(kept["fresh"], None)
    (tmp_path / ".labels.npy.abcdefgh.tmp").mkdir()  # not a regular file
    os.utime(tmp_path / ".labels.npy.abcdefgh.tmp", (old, old))
    removed = remove_stale_temporaries(tmp_path, ["fog.npy", "labels.npy"], before=time.time() - 60)
    assert removed == [stale] and not stale.exists()
    assert all(path.exists() for path in kept.values())
    assert (tmp_path / ".labels.npy.abcdefgh.tmp").is_dir()
    assert temporary_pattern("fog.npy").match(".fog.npy.ab_d12x9.tmp")
