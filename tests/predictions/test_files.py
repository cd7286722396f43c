"""Reading predictions files (macs_audit/predictions/files.py): the three formats hold the same predictions, the
column rule, probabilities read as log-probabilities, a binary classifier's one column, and each bad input a
one-line InputError that names the file."""

import csv
from pathlib import Path

import numpy as np
import pytest

from macs_audit.errors import InputError
from macs_audit.predictions.files import read_predictions
from macs_audit.scores import SUM_TOLERANCE

RNG = np.random.default_rng(0)
LABELS = np.arange(12) % 3
LOGITS = RNG.normal(size=(12, 3)) + 2 * np.eye(3)[LABELS]
PROBABILITIES = np.exp(LOGITS) / np.exp(LOGITS).sum(axis=1, keepdims=True)
NAMES = ["cat", "dog", "owl"]


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def table(kind: str = "logit", values: np.ndarray = LOGITS, labels=None, extra: dict | None = None) -> tuple:
    """A predictions table's header and rows: id, label, one column per class, and `extra` columns."""
    labels = [NAMES[k] for k in LABELS] if labels is None else list(labels)
    extra = extra or {}
    header = ["id", "label", *(f"{kind}_{name}" for name in NAMES), *extra]
    rows = [
        [f"s{i}", labels[i], *(repr(float(v)) for v in values[i]), *(column[i] for column in extra.values())]
        for i in range(len(values))
    ]
    return header, rows


def test_the_three_formats_hold_the_same_predictions(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    np.savez(tmp_path / "p.npz", logits=LOGITS, labels=LABELS, class_names=np.array(NAMES), ids=np.array(
        [f"s{i}" for i in range(12)]
    ))  # fmt: skip
    header, rows = table(extra={"site": ["a", "b"] * 6})
    write_csv(tmp_path / "p.csv", header, rows)
    columns = {"id": [f"s{i}" for i in range(12)], "label": LABELS.tolist()}
    columns |= {f"logit_{name}": LOGITS[:, k].tolist() for k, name in enumerate(NAMES)}
    pq.write_table(pa.table(columns), tmp_path / "p.parquet")
    read = [read_predictions(tmp_path / name) for name in ("p.npz", "p.csv", "p.parquet")]
    for found in read:
        np.testing.assert_array_equal(found.logits, LOGITS)  # repr() of a float64 reads back to the same bits
        np.testing.assert_array_equal(found.labels, LABELS)
        assert found.class_names == NAMES and found.kind == "logits" and not found.binary
        assert [str(i) for i in found.ids] == [f"s{i}" for i in range(12)]
    assert list(read[1].metadata) == ["site"] and read[1].metadata["site"][1] == "b"


def test_probabilities_become_log_probabilities_whose_softmax_is_them(tmp_path):
    write_csv(tmp_path / "p.csv", *table("prob", PROBABILITIES, labels=LABELS))
    found = read_predictions(tmp_path / "p.csv")
    assert found.kind == "probabilities"
    softmax = np.exp(found.logits) / np.exp(found.logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(softmax, PROBABILITIES, rtol=1e-12)
    np.savez(tmp_path / "p.npz", probabilities=np.eye(3)[LABELS], labels=LABELS)  # zeros: floored, not -inf
    assert np.isfinite(read_predictions(tmp_path / "p.npz").logits).all()


def test_one_column_is_a_binary_classifiers_positive_class(tmp_path):
    z = RNG.normal(size=20)
    labels = (z + RNG.normal(size=20) > 0).astype(int)
    np.savez(tmp_path / "logit.npz", logits=z, labels=labels)
    found = read_predictions(tmp_path / "logit.npz")
    assert found.binary and found.num_classes == 2 and found.names() == ["0", "1"]
    softmax = np.exp(found.logits) / np.exp(found.logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(softmax[:, 1], 1 / (1 + np.exp(-z)), rtol=1e-12)  # the sigmoid of class 1
    p = 1 / (1 + np.exp(-z))
    write_csv(
        tmp_path / "p.csv", ["label", "prob_malignant"], [[y, repr(float(v))] for y, v in zip(labels, p, strict=True)]
    )
    found = read_predictions(tmp_path / "p.csv")
    assert found.binary and found.class_names == ["not malignant", "malignant"]
    np.testing.assert_allclose(np.exp(found.logits), np.stack([1 - p, p], axis=1), rtol=1e-12)


def test_another_label_column_and_integer_labels(tmp_path):
    header, rows = table(labels=LABELS)
    header[1] = "target"
    write_csv(tmp_path / "p.csv", header, rows)
    np.testing.assert_array_equal(read_predictions(tmp_path / "p.csv", label_column="target").labels, LABELS)
    found = read_predictions(tmp_path / "p.csv", labels=False)  # no label column: read without labels
    assert found.labels is None and "target" in found.metadata


def _bad(tmp: Path, name: str) -> Path:
    """Each bad file of BAD, written to `tmp`."""
    path = tmp / name
    nan = LOGITS.copy()
    nan[3, 1], nan[7, 0] = np.nan, np.inf
    unnormalised = PROBABILITIES.copy()
    unnormalised[4] *= 0.9
    makers = {
        "nan.npz": lambda: np.savez(path, logits=nan, labels=LABELS),
        "range.npz": lambda: np.savez(path, logits=LOGITS, labels=np.where(LABELS == 2, 3, LABELS)),
        "lengths.npz": lambda: np.savez(path, logits=LOGITS, labels=LABELS[:-1]),
        "sums.npz": lambda: np.savez(path, probabilities=unnormalised, labels=LABELS),
        "ids.csv": lambda: write_csv(path, *_with_ids(["s0", "s1", "s2", "s1"] + [f"t{i}" for i in range(8)])),
        "nolabel.csv": lambda: write_csv(path, *_without_labels()),
        "both.npz": lambda: np.savez(path, logits=LOGITS, probabilities=PROBABILITIES, labels=LABELS),
        "typo.npz": lambda: np.savez(path, logits=LOGITS, label=LABELS),
        "mixed.csv": lambda: write_csv(path, ["label", "logit_a", "prob_b"], [[0, 1.0, 0.5]]),
        "noclass.csv": lambda: write_csv(path, ["label", "cat", "dog"], [[0, 1.0, 0.5]]),
        "cell.csv": lambda: write_csv(path, ["label", "logit_a", "logit_b"], [[0, 1.0, 0.5], [1, "x", 0.1]]),
        "name.csv": lambda: write_csv(path, *table(labels=["cat"] * 11 + ["emu"])),
        "p.txt": lambda: path.write_text("1,2\n"),
    }
    makers[name]()
    return path


def _with_ids(ids: list[str]) -> tuple:
    header, rows = table()
    for row, sample in zip(rows, ids, strict=True):
        row[0] = sample
    return header, rows


def _without_labels() -> tuple:
    header, rows = table()
    return header[:1] + header[2:], [row[:1] + row[2:] for row in rows]


BAD = [
    ("nan.npz", r"logits hold 2 NaN or infinite values, the first at row 3, column 1"),
    ("range.npz", r"label 3 \(row 2\) is out of range for 3 classes \(0\.\.2\); 4 labels are"),
    ("lengths.npz", r"11 labels for 12 rows of logits"),
    ("sums.npz", rf"probabilities must sum to 1 per row \(within {SUM_TOLERANCE:g}\); 1 rows do not, the first row 4"),
    ("ids.csv", r"id 's1' appears 2 times \(rows 1 and 3\); ids must be unique"),
    ("nolabel.csv", r"the file has no labels; the audit needs a column named 'label'"),
    ("both.npz", r"holds both 'logits' and 'probabilities'; give exactly one"),
    ("typo.npz", r"unknown array 'label' \(did you mean 'labels'\?"),
    ("mixed.csv", r"the class columns mix logit_ and prob_"),
    ("noclass.csv", r"no class columns: name one per class logit_<class> or prob_<class> \(columns: label, cat, dog\)"),
    ("cell.csv", r"column 'logit_a' row 1 is 'x', not a number"),
    ("name.csv", r"label 'emu' \(row 11\) is not a class \(cat, dog, owl\)"),
    ("p.txt", r"cannot tell predictions from a \.txt file; use \.npz, \.csv, \.parquet"),
]


@pytest.mark.parametrize(("name", "message"), BAD, ids=[name for name, _ in BAD])
def test_bad_files_are_one_line_errors_naming_the_file(tmp_path, name, message):
    path = _bad(tmp_path, name)
    with pytest.raises(InputError, match=message) as caught:
        read_predictions(path)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(str(path))
