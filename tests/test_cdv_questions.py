"""Loading, validating, sampling and shuffling CDV questions."""

import json
from collections import Counter

import pytest

from stressprobe.cdv.questions import HF_ADAPTERS, prepare_questions, read_question_file, validate_items
from stressprobe.errors import StressprobeError
from tests.support.helpers import shared_data


def write(tmp_path, name, items):
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(i) + "\n" for i in items))
    else:
        path.write_text(json.dumps(items))
    return path


ITEMS = [
    {"question": f"Question {i}?", "choices": ["right", "w1", "w2", "w3"], "answer": "right", "source": "t"}
    for i in range(20)
]


def test_sample_is_seeded_and_choices_shuffled_with_answer_tracked(tmp_path):
    path = write(tmp_path, "set.json", ITEMS)
    a = prepare_questions("t", str(path), None, None, "test", 5, seed=1)
    b = prepare_questions("t", str(path), None, None, "test", 5, seed=1)
    c = prepare_questions("t", str(path), None, None, "test", 5, seed=2)
    assert a == b and [q["qid"] for q in a] != [q["qid"] for q in c]
    assert len(a) == 5 and len({q["qid"] for q in a}) == 5
    for q in a:
        assert q["choices"][q["answer_index"]] == q["answer"] == "right"
    # Over all 20 questions the correct answer does not stay in first place.
    everything = prepare_questions("t", str(path), None, None, "test", None, seed=1)
    assert len(Counter(q["answer_index"] for q in everything)) > 1


def test_qids_are_stable_and_independent_of_the_sample(tmp_path):
    path = write(tmp_path, "set.jsonl", ITEMS)
    small = prepare_questions("t", str(path), None, None, "test", 3, seed=7)
    full = {q["qid"]: q for q in prepare_questions("t", str(path), None, None, "test", None, seed=7)}
    for q in small:
        assert full[q["qid"]] == q


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"question": "Q?", "choices": ["a", "b"], "answer": "c"}, "is not among its choices"),
        ({"question": "Q?", "choices": ["a"], "answer": "a"}, "fewer than 2 distinct choices"),
        ({"question": "Q?", "choices": ["a", "a"], "answer": "a"}, "fewer than 2 distinct choices"),
        ({"question": "", "choices": ["a", "b"], "answer": "a"}, "'question' is missing"),
        ({"question": "Q?", "choices": "a b", "answer": "a"}, "'choices' must be a list"),
        ("just a string", "expected an object"),
    ],
)
def test_bad_items_name_file_and_question(tmp_path, item, message):
    path = write(tmp_path, "bad.jsonl", [ITEMS[0], item])
    with pytest.raises(StressprobeError, match=message) as info:
        prepare_questions("t", str(path), None, None, "test", None, seed=1)
    assert f"{path}:2" in str(info.value) and "\n" not in str(info.value)


def test_duplicate_ids_are_rejected(tmp_path):
    path = write(tmp_path, "dup.json", [ITEMS[0], ITEMS[1], ITEMS[0]])
    with pytest.raises(StressprobeError, match=r"duplicate question id .* \(also at .*\[0\]\)"):
        prepare_questions("t", str(path), None, None, "test", None, seed=1)
    explicit = [{**ITEMS[0], "id": "x"}, {**ITEMS[1], "id": "x"}]
    path = write(tmp_path, "dup2.json", explicit)
    with pytest.raises(StressprobeError, match=r"dup2.json\[1\]: duplicate question id 'x'"):
        prepare_questions("t", str(path), None, None, "test", None, seed=1)


def test_malformed_json_is_one_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[{"question": "Q?", ')
    with pytest.raises(StressprobeError, match="broken.json: not valid JSON"):
        read_question_file(path)
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(ITEMS[0]) + "\n{oops\n")
    with pytest.raises(StressprobeError, match="broken.jsonl:2: not valid JSON"):
        read_question_file(path)
    path = tmp_path / "obj.json"
    path.write_text("{}")
    with pytest.raises(StressprobeError, match="expected a JSON list"):
        read_question_file(path)


def test_duplicate_choices_are_merged():
    items = validate_items("t", [("f[0]", {"question": "Q?", "choices": ["a", "a", "b"], "answer": "a"})])
    assert items[0]["choices"] == ["a", "b"]


def test_hf_adapters_convert_rows():
    mmlu = HF_ADAPTERS["cais/mmlu"]({"question": "Q", "choices": ["a", "b"], "answer": 1, "subject": "s"})
    assert mmlu == {"question": "Q", "choices": ["a", "b"], "answer": "b", "subject": "s"}
    csqa = HF_ADAPTERS["tau/commonsense_qa"](
        {"question": "Q", "choices": {"label": ["A", "B"], "text": ["x", "y"]}, "answerKey": "B"}
    )
    assert csqa["answer"] == "y"
    tqa = HF_ADAPTERS["truthfulqa/truthful_qa"](
        {"question": "Q", "mc1_targets": {"choices": ["t", "f"], "labels": [1, 0]}}
    )
    assert tqa["answer"] == "t"


@pytest.mark.parametrize("name", ["MMLU", "CommonsenseQA", "OpenbookQA", "TruthfulQA"])
def test_real_sets_load(name):
    path = shared_data("cdv", f"{name}.json")
    questions = prepare_questions(name, str(path), None, None, "test", 100, seed=42)
    assert len(questions) == 100
    if name == "TruthfulQA":  # the source lists the correct answer first; shuffled it must not stay there
        assert sum(q["answer_index"] == 0 for q in questions) < 60


def test_editing_a_local_question_file_prepares_its_dataset_again(tmp_path):
    import yaml

    from tests.support.helpers import TINY_CONFIG, make_workdir, run_snakemake

    workdir = make_workdir(tmp_path / "work")
    questions = write(tmp_path, "set.json", ITEMS)
    config = yaml.safe_load(TINY_CONFIG.read_text())
    config["cdv"]["datasets"] = {"OpenbookQA": {"path": str(questions), "n": 2}}
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    target = "results/cdv/data/OpenbookQA.jsonl"
    run_snakemake(workdir, target, configfile=configfile)
    unchanged = run_snakemake(workdir, "-n", target, configfile=configfile)
    assert "Nothing to be done" in unchanged.stdout + unchanged.stderr
    write(tmp_path, "set.json", [*ITEMS, {**ITEMS[0], "question": "A new question?"}])
    again = run_snakemake(workdir, "-n", target, configfile=configfile)
    assert "rule cdv_prepare:" in again.stdout + again.stderr


def test_choices_keep_the_sources_order_when_shuffling_is_off(tmp_path):
    path = tmp_path / "q.json"
    items = [
        {"question": f"Q{i}?", "choices": [f"right {i}", "x", "y", "z"], "answer": f"right {i}"}
        for i in range(8)
    ]
    path.write_text(json.dumps(items))
    kept = prepare_questions("t", str(path), None, None, "test", None, seed=1, shuffle=False)
    assert [q["choices"] for q in kept] == [item["choices"] for item in items]
    assert {q["answer_index"] for q in kept} == {0}
    shuffled = prepare_questions("t", str(path), None, None, "test", None, seed=1)
    assert {q["answer_index"] for q in shuffled} != {0}
