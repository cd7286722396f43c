"""macs_audit.outputs: output files and folders checked before the work. An input is never replaced (its path, a
link or hard link to it, a file its pattern names, a path inside an input folder, a link inside that folder);
an existing output only with force; a folder that cannot be written fails at once. The commands' own rows are
tests/cli/test_clobber.py."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from macs_audit import outputs
from macs_audit.errors import OutputError, UsageError
from macs_audit.inputs import ShardPattern


def _tree(root: Path, folders: int, files: int) -> None:
    for f in range(folders):
        (root / f"c{f}").mkdir(parents=True)
        for i in range(files):
            (root / f"c{f}" / f"{i}.png").write_bytes(b"x")


# ---------------------------------------------------------------------------------------------
# check_file
# ---------------------------------------------------------------------------------------------
def test_a_new_or_forced_file_lands_where_its_links_point(tmp_path: Path) -> None:
    dest = outputs.check_file(tmp_path / "new" / "report.json")  # a missing folder is created later
    assert dest.file == tmp_path.resolve() / "new" / "report.json"
    (tmp_path / "real.json").write_text("{}")
    os.symlink(tmp_path / "real.json", tmp_path / "link.json")
    assert outputs.check_file(tmp_path / "link.json").file == (tmp_path / "real.json").resolve()
    with pytest.raises(UsageError, match=r"link.json already exists; pass --force to replace it"):
        outputs.check_file(tmp_path / "link.json", force=False)


def test_streams_need_no_checks_and_a_directory_is_refused(tmp_path: Path) -> None:
    assert outputs.check_file("-", inputs=["-"], force=False).is_stream
    with pytest.raises(UsageError, match="is a directory; name a file"):
        outputs.check_file(tmp_path)


def test_an_input_file_is_never_replaced_by_path_link_or_hard_link(tmp_path: Path) -> None:
    data = tmp_path / "data.npz"
    data.write_bytes(b"x")
    os.symlink(data, tmp_path / "soft.npz")
    os.link(data, tmp_path / "hard.npz")
    for output in (data, tmp_path / "soft.npz", tmp_path / "hard.npz"):
        with pytest.raises(UsageError, match=r"^-o \S+ would replace the input \S+data.npz; choose another -o$"):
            outputs.check_file(output, inputs=[None, "-", data], option="-o")


def test_a_path_inside_an_input_folder_or_named_by_a_pattern_is_refused(tmp_path: Path) -> None:
    _tree(tmp_path / "images", 2, 2)
    with pytest.raises(UsageError, match="would write into the input folder"):
        outputs.check_file(tmp_path / "images" / "c0" / "report.json", inputs=[tmp_path / "images"])
    pattern = ShardPattern(str(tmp_path / "shards-{000..009}.tar"))
    with pytest.raises(UsageError, match=r"would replace the input \S+shards-004.tar of \S+\{000..009\}.tar"):
        outputs.check_file(tmp_path / "shards-004.tar", inputs=[pattern])
    outputs.check_file(tmp_path / "shards-010.tar", inputs=[pattern])  # outside the range: not an input


def test_an_existing_output_linked_from_a_pattern_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out.tar").write_bytes(b"x")
    os.symlink(tmp_path / "out.tar", tmp_path / "shards-001.tar")
    with pytest.raises(UsageError, match=r"would replace the input \S+shards-001.tar"):
        outputs.check_file(tmp_path / "out.tar", inputs=[ShardPattern(str(tmp_path / "shards-{000..001}.tar"))])


def test_a_link_in_a_small_folder_is_found(tmp_path: Path) -> None:
    _tree(tmp_path / "data", 3, 4)
    (tmp_path / "out.json").write_text("{}")
    os.symlink(tmp_path / "out.json", tmp_path / "data" / "c1" / "linked.png")
    with pytest.raises(UsageError, match="would replace the input .*linked.png"):
        outputs.check_file(tmp_path / "out.json", inputs=[tmp_path / "data"])


def test_a_large_folder_is_listed_only_up_to_the_bound(tmp_path: Path, monkeypatch) -> None:
    """The comparison through links lists at most MAX_LINK_ENTRIES entries of an input folder (an ImageNet train
    tree is not listed on every rerun)."""
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


def test_a_folder_that_cannot_hold_the_file_fails_before_the_work(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "plain").write_text("")
    with pytest.raises(OutputError, match=r"cannot write \S+report.json: .*a part of the path is a file"):
        outputs.check_file(tmp_path / "plain" / "sub" / "report.json")
    with pytest.raises(UsageError, match=r"cannot write \S+sub: \S+plain is a file, not a folder"):
        outputs.check_folder(tmp_path / "plain" / "sub", [], folders=["hf"])
    monkeypatch.setattr(outputs.os, "access", lambda path, mode: False)  # root may write anywhere: pretend not
    with pytest.raises(OutputError, match=r"cannot write \S+report.json: " + os.strerror(errno.EACCES)):
        outputs.check_file(tmp_path / "report.json")


# ---------------------------------------------------------------------------------------------
# check_folder
# ---------------------------------------------------------------------------------------------
def test_an_output_folder_is_a_folder_and_not_standard_output(tmp_path: Path) -> None:
    assert outputs.check_folder(tmp_path / "out", ["a.json"]) == tmp_path / "out"
    with pytest.raises(UsageError, match="'-' \\(standard output\\) cannot be one"):
        outputs.check_folder("-", ["a.json"])
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="is a file; name a folder"):
        outputs.check_folder(tmp_path / "file", ["a.json"])
    (tmp_path / "out" / "a.json").mkdir(parents=True)
    with pytest.raises(UsageError, match="is a directory; name a file"):
        outputs.check_folder(tmp_path / "out", ["a.json"])


def test_files_already_in_the_folder_need_force_and_are_all_named(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "a.json").write_text("{}")
    names = ["a.json", "b.json", "c.onnx"]
    with pytest.raises(UsageError, match=r"already holds a.json; pass --force to replace it or choose another --out$"):
        outputs.check_folder(out, names, force=False)
    (out / "c.onnx").write_text("")
    (out / "hf").mkdir()
    with pytest.raises(UsageError, match=r"already holds hf, a.json, c.onnx; pass --force to replace them"):
        outputs.check_folder(out, names, force=False, folders=["hf"])
    assert outputs.check_folder(out, names, force=True, folders=["hf"]) == out


def test_no_file_of_an_output_folder_replaces_an_input(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.onnx").write_text("")
    with pytest.raises(UsageError, match=r"--out \S+out would replace the input \S+model.onnx \(model.onnx\)"):
        outputs.check_folder(out, ["report.json", "model.onnx"], inputs=[out / "model.onnx"])
    with pytest.raises(UsageError, match="would write into the input folder"):
        outputs.check_folder(out, ["report.json"], inputs=[out])


def test_a_folder_written_whole_never_replaces_or_holds_an_input(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "hf").mkdir(parents=True)
    (out / "hf" / "config.json").write_text("{}")
    with pytest.raises(UsageError, match=r"would replace the folder \S+hf, which holds the input \S+config.json"):
        outputs.check_folder(out, [], folders=["hf"], inputs=[out / "hf" / "config.json"])
    with pytest.raises(UsageError, match=r"would replace the input \S+hf \(hf\)"):
        outputs.check_folder(out, [], folders=["hf"], inputs=[out / "hf"])
    with pytest.raises(UsageError, match="would write into the input folder"):
        outputs.check_folder(out, [], folders=["hf"], inputs=[tmp_path])


# ---------------------------------------------------------------------------------------------
# check_distinct
# ---------------------------------------------------------------------------------------------
def test_two_outputs_are_two_files_but_streams_may_repeat(tmp_path: Path) -> None:
    outputs.check_distinct([("-o", "-"), ("-o", "-"), ("--save-predictions", None), ("-o", tmp_path / "a.json")])
    with pytest.raises(UsageError, match=r"^-o \S+a.json is given twice; give each output its own file$"):
        outputs.check_distinct([("-o", tmp_path / "a.json"), ("-o", tmp_path / "a.json")])
    (tmp_path / "a.json").write_text("{}")
    os.symlink(tmp_path / "a.json", tmp_path / "b.json")
    with pytest.raises(UsageError, match=r"^-o and --save-predictions name \S+b.json; give each output its own file$"):
        outputs.check_distinct([("-o", tmp_path / "a.json"), ("--save-predictions", tmp_path / "b.json")])
