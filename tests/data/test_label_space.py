"""Label spaces: a data set's classes mapped to a model's outputs by timm's WordNet lists, the model's class
names or a class map file; a map that leaves classes out is a one-line error naming them."""

import json

import numpy as np
import pytest

from macs_audit.data import label_space as ls
from macs_audit.errors import InputError, UsageError


def test_imagenet_a_and_r_map_by_timms_own_index_lists():
    synsets = ls.imagenet_synsets()
    assert len(synsets) == 1000 and synsets[0] == "n01440764"
    for name, (synset_file, index_file) in ls.KNOWN_SUBSETS.items():
        classes = sorted(ls.timm_lines(synset_file))  # an ImageFolder's classes: its folders, sorted
        space = ls.label_space(classes, 1000)
        assert space.is_subset and len(space.classes) == 200 and name in space.mapped_by
        # The index list and the place of each synset in the 1,000 agree: the map is the WordNet one.
        assert [synsets[o] for o in space.outputs] == classes
        listed = dict(zip(ls.timm_lines(synset_file), map(int, ls.timm_lines(index_file)), strict=True))
        assert space.outputs.tolist() == [listed[c] for c in classes]


def test_a_few_wordnet_ids_map_to_their_place_among_the_1000():
    synsets = ls.imagenet_synsets()
    classes = [synsets[7], synsets[400], synsets[999]]
    space = ls.label_space(classes, 1000)
    assert space.outputs.tolist() == [7, 400, 999] and "imagenet_synsets" in space.mapped_by
    labels = np.array([2, 0, 1, 2])
    assert space.model_labels(labels).tolist() == [999, 7, 400, 999]
    logits = np.arange(2 * 1000, dtype=np.float32).reshape(2, 1000)
    assert space.restrict(logits).tolist() == [[7, 400, 999], [1007, 1400, 1999]]


def test_a_full_imagenet_folder_is_the_identity():
    space = ls.label_space(sorted(ls.imagenet_synsets()), 1000)
    assert space.is_identity and not space.is_subset


def test_unknown_wordnet_ids_are_named():
    with pytest.raises(InputError, match=r"1 of the data's classes does not map: n99999999$"):
        ls.label_space([ls.imagenet_synsets()[3], "n99999999"], 1000)


def test_wordnet_ids_need_a_1000_output_model():
    with pytest.raises(InputError, match="not ImageNet's 1000; pass --class-map"):
        ls.label_space(["n01440764", "n01443537"], 10)


def test_the_models_class_names_map_and_a_partial_match_names_the_rest():
    model = ["cat", "dog", "ship", "truck"]
    assert ls.label_space(["ship", "cat"], 4, model_classes=model).outputs.tolist() == [2, 0]
    with pytest.raises(InputError, match=r"the model's class names: 2 of the data's classes do not map: bus, car"):
        ls.label_space(["ship", "bus", "car"], 4, model_classes=model)


def test_names_that_cannot_map_ask_for_a_class_map():
    with pytest.raises(InputError, match="pass --class-map FILE"):
        ls.label_space(["a", "b"], 10)


@pytest.mark.parametrize("kind", ["json", "csv"])
def test_class_map_files(tmp_path, kind):
    path = tmp_path / f"map.{kind}"
    if kind == "json":
        path.write_text(json.dumps({"bus": 779, "cat": 281}))
    else:
        path.write_text("class,index\nbus,779\ncat,281\n")
    mapping = ls.read_class_map(path)
    space = ls.label_space(["bus", "cat"], 1000, class_map=mapping, class_map_name=str(path))
    assert space.outputs.tolist() == [779, 281] and str(path) in space.mapped_by


def test_a_partial_class_map_names_the_classes_it_leaves_out(tmp_path):
    with pytest.raises(InputError, match=r"^class map m.json: 2 of the data's classes do not map: car, dog$"):
        ls.label_space(["bus", "car", "dog"], 1000, class_map={"bus": 3}, class_map_name="m.json")


def test_a_class_map_outside_the_outputs_or_onto_one_output_is_refused():
    with pytest.raises(InputError, match="map outside the model's 10 outputs: b"):
        ls.label_space(["a", "b"], 10, class_map={"a": 1, "b": 10})
    with pytest.raises(InputError, match="several data classes map to one output"):
        ls.label_space(["a", "b"], 10, class_map={"a": 1, "b": 1})


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        ("[1, 2]", ".json", "expected a JSON object"),
        ("{bad", ".json", "not valid JSON"),
        ('{"a": "x"}', ".json", "not an output index"),
        ("a,1,2\n", ".csv", "every CSV row must be class,index"),
        ("{}", ".json", "maps no class"),
        ("a 1", ".txt", "expected a .json or .csv file"),
    ],
)
def test_bad_class_map_files(tmp_path, text, suffix, message):
    path = tmp_path / f"map{suffix}"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        ls.read_class_map(path)


def test_numbered_folders_map_to_the_output_of_their_number_not_their_sorted_place():
    classes = sorted(str(i) for i in range(1000))  # ImageNetV2's folders as an ImageFolder lists them
    space = ls.label_space(classes, 1000)
    assert classes[2] == "10" and space.outputs[2] == 10 and "output indices" in space.mapped_by
    with pytest.raises(InputError, match="map outside the model's 1000 outputs: 1000"):
        ls.label_space(["3", "1000"], 1000)
