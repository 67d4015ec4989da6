"""A CDV benchmark without a search (any model on a file of perturbed questions) and the classifier study
from the authors' released labels (Table 7's Baseline row)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from stressprobe.cdv import paper_report
from stressprobe.cdv.benchmark import read_benchmark
from stressprobe.cdv.evaluate import evaluate
from stressprobe.cdv.release import read_release_labels, release_rows, release_study
from stressprobe.errors import StressprobeError
from stressprobe.io import write_jsonl
from tests.support.cdv_scripted import ScriptedModel
from tests.support.helpers import shared_data


def release_shaped(i: int, right: int) -> dict:
    """A record shaped like the authors' train/dpo_test.json (written here, not copied)."""
    choices = [f"option {i}-{k}" for k in range(4)]
    return {
        "conversations": [],
        "chosen": {},
        "rejected": {},
        "question": f"Some background. What is asked in question {i}?",
        "choices": choices,
        "ground_truth": choices[right],
        "source": "OpenbookQA" if i % 2 else "MMLU",
        "unique_id": i,
    }


def test_a_release_shaped_file_is_evaluated_per_source_and_pooled(tmp_path):
    path = tmp_path / "dpo_test.json"
    path.write_text(json.dumps([release_shaped(i, right=0 if i < 3 else 2) for i in range(4)]))
    items = read_benchmark(path)
    assert [i["answer_index"] for i in items] == [0, 0, 0, 2]
    assert items[1]["qid"] == "OpenbookQA/1" and items[1]["source"] == "OpenbookQA"
    records = evaluate(ScriptedModel(), items, 16, 0, temperature=0.001)  # it always answers A
    for record, item in zip(records, items, strict=True):
        record["source"] = item["source"]
    out = tmp_path / "benchmark" / "dpo_test" / "gpt-4o.jsonl"
    out.parent.mkdir(parents=True)
    write_jsonl(out, records)
    table = paper_report.benchmark_table([str(out)]).set_index("dataset")
    assert table.loc["all", "accuracy"] == pytest.approx(3 / 4) and table.loc["all", "n"] == 4
    assert table.loc["MMLU", "accuracy"] == pytest.approx(1.0)  # ids 0 and 2: A is right
    assert table.loc["OpenbookQA", "accuracy"] == pytest.approx(0.5)  # ids 1 (A right) and 3 (C right)
    assert (table["model"] == "gpt-4o").all() and (table["benchmark"] == "dpo_test").all()


def test_a_projects_perturbed_file_reads_as_a_benchmark(tmp_path):
    path = tmp_path / "perturbed.jsonl"
    write_jsonl(
        path, [{"qid": "q1", "node_id": "q1/1", "question": "Q?", "choices": ["a", "b"], "answer_index": 1}]
    )
    (item,) = read_benchmark(path)
    assert (item["qid"], item["node_id"], item["answer_index"], item["condition"]) == (
        "q1",
        "q1/1",
        1,
        "perturbed",
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[{"question": "Q?", "choices": ["a", "b"], "ground_truth": "c"}]',
            r"x\.json:1: ground_truth is not one",
        ),
        ('[{"question": "Q?", "choices": ["a", "b"]}]', r"x\.json:1: no answer_index or ground_truth"),
        ('[{"choices": ["a", "b"], "answer_index": 0}]', r"x\.json:1: missing question"),
        (
            '[{"question": "Q?", "choices": ["a", "b"], "answer_index": 5}]',
            r"answer_index 5 is not a position",
        ),
        ("[1,", r"x\.json: not valid JSON"),
        ("[]", r"x\.json: no questions"),
    ],
)
def test_a_bad_benchmark_file_is_a_one_line_error(tmp_path, text, message):
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(StressprobeError, match=message) as error:
        read_benchmark(path)
    assert "\n" not in str(error.value)


def test_the_released_dpo_test_set_is_a_benchmark_of_241_questions():
    items = read_benchmark(shared_data("cdv", "llm_cdv_release", "dpo_test.json"))
    # 241 perturbed questions of 103 original ones (several perturbations of one question)
    assert len({i["node_id"] for i in items}) == 241 and len({i["qid"] for i in items}) == 103
    assert {i["source"] for i in items} <= {"MMLU", "CommonsenseQA", "OpenbookQA", "TruthfulQA"}


def instruction(question: str, choices: list[str]) -> str:
    return f"Determine whether the following question is too simple to be enhanced:\nQuestion: {question}\nChoices: {choices!r}"


def test_released_labels_read_with_yes_as_easy_to_perturb(tmp_path):
    path = tmp_path / "train_data.json"
    records = [
        {"instruction": instruction(f"Q{i}?", ["a", "b"]), "input": "", "output": o}
        for i, o in enumerate("YNY")
    ]
    path.write_text(json.dumps([{**r, "output": {"Y": "Yes", "N": "No"}[r["output"]]} for r in records]))
    rows = read_release_labels(path)
    assert (
        [r["label"] for r in rows] == [1, 0, 1]
        and rows[0]["choices"] == ["a", "b"]
        and rows[2]["question"] == "Q2?"
    )
    path.write_text(json.dumps([{"instruction": instruction("Q?", ["a"]), "output": "Maybe"}]))
    with pytest.raises(StressprobeError, match=r"record 0: output 'Maybe' is not Yes or No"):
        read_release_labels(path)
    path.write_text(json.dumps([{"instruction": "no question here", "output": "Yes"}]))
    with pytest.raises(StressprobeError, match=r"record 0: no 'Question:'/'Choices:' lines"):
        read_release_labels(path)


def _embed(texts):
    """A stand-in embedding for the unit test (the workflow embeds with all-MiniLM-L6-v2)."""
    import numpy as np

    return np.array(
        [[len(t) % 7, t.count("?"), len(t.split()) % 5, float(i % 3)] for i, t in enumerate(texts)]
    )


def test_the_released_labels_reproduce_table7s_baseline_row_exactly():
    train = read_release_labels(shared_data("cdv", "llm_cdv_release", "train_data.json"))
    test = read_release_labels(shared_data("cdv", "llm_cdv_release", "valid_data.json"))
    assert (len(train), len(test)) == (1080, 120)  # section 4.3: 1,080 training samples, 120 test cases
    study = release_study(train, test, _embed, 0.5)["study"]
    baseline = study["none"]["test"]
    # Table 7, Baseline: precision 0.558, recall 1.000, F0.5 0.612
    assert (round(baseline["precision"], 3), baseline["recall"], round(baseline["f_beta"], 3)) == (
        0.558,
        1.0,
        0.612,
    )
    # The MiniLM row recomputed here from the logistic regression's own kept set: TP / kept, TP / positives.
    from stressprobe.cdv.classifier import fit_logit, predict_logit

    vectors = _embed([r["question"] for r in train + test])
    fitted = fit_logit(vectors[: len(train)], np.array([r["label"] for r in train]))
    kept = [p >= 0.5 for p in predict_logit(fitted, vectors[len(train) :])]
    hits = sum(k and r["label"] for k, r in zip(kept, test, strict=True))
    trained = study["trained"]["test"]
    assert trained["n"] == 120 and trained["precision"] == hits / sum(kept)
    assert trained["recall"] == hits / 67


def test_release_study_scores_prompt_classifiers_and_rows_for_lora_on_the_released_split():
    train = [
        {"qid": f"train_data/{i}", "question": f"T{i}?", "choices": ["a", "b"], "label": i % 2}
        for i in range(6)
    ]
    test = [
        {"qid": f"valid_data/{i}", "question": f"V{i}?", "choices": ["a", "b"], "label": y}
        for i, y in enumerate([1, 1, 0, 0, 1])
    ]
    # A prompt classifier that says yes to valid 0, 2 and 3 and gives valid 4 no score (kept, never filtered).
    scores = {"m": {"valid_data/0": 1.0, "valid_data/1": 0.0, "valid_data/2": 1.0, "valid_data/3": 1.0}}
    study = release_study(train, test, _embed, 0.5, scores)["study"]
    row = study["prompt:m"]["test"]
    # kept: 0, 2, 3, 4; positives among them: 0 and 4 -> precision 2/4, recall 2/3
    assert (row["n"], row["positives"], row["precision"], row["recall"]) == (5, 3, 0.5, 2 / 3)
    assert row["f_beta"] == pytest.approx(1.25 * 0.5 * (2 / 3) / (0.25 * 0.5 + 2 / 3))
    rows, questions = release_rows(train, test)
    assert [r["split"] for r in rows] == ["train"] * 6 + ["test"] * 5
    assert [r["label"] for r in rows if r["split"] == "test"] == [1, 1, 0, 0, 1]
    assert questions["valid_data/3"]["question"] == "V3?"
