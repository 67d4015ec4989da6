"""Appendix B's human evaluation: the exported sheet a person fills, and Table 8 from filled sheets (the
sheets here are filled by the test)."""

from __future__ import annotations

import csv

import pytest

from stressprobe.cdv.human_eval import COLUMNS, read_sheet, sample_pairs, table8, write_sheet
from stressprobe.errors import StressprobeError
from tests.support.cdv_scripted import make_item


def _pairs(dataset, n_questions, n):
    questions = [make_item(f"{dataset}-{i}") for i in range(n_questions)]
    perturbed = [
        {**q, "node_id": f"{q['qid']}/1", "question": "Context. " + q["question"]} for q in questions
    ]
    return sample_pairs(dataset, questions, perturbed, n, seed=0)


def _fill(path, out, answers):
    """Fill a sheet as a rater would: answers(row index) -> (semantic, consistent) as Yes/No."""
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    for i, row in enumerate(rows):
        row["semantic_equivalence"], row["answer_consistency"] = answers(i)
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return out


def test_the_sheet_has_n_pairs_per_dataset_with_both_questions_blank(tmp_path):
    rows = _pairs("MMLU", 30, 20) + _pairs("TruthfulQA", 10, 20)
    write_sheet(tmp_path / "sheet.csv", rows)
    with (tmp_path / "sheet.csv").open(encoding="utf-8", newline="") as handle:
        read = list(csv.DictReader(handle))
    assert [r["dataset"] for r in read].count("MMLU") == 20 and [r["dataset"] for r in read].count(
        "TruthfulQA"
    ) == 10
    assert all(r["semantic_equivalence"] == r["answer_consistency"] == "" for r in read)
    assert read[0]["original_question"] != read[0]["perturbed_question"] and read[0]["answer"] == "choice 0"
    assert _pairs("MMLU", 30, 20) == _pairs("MMLU", 30, 20)  # seeded: the same pairs again


def test_filled_sheets_of_two_groups_become_table8(tmp_path):
    write_sheet(tmp_path / "sheet.csv", _pairs("MMLU", 20, 20) + _pairs("OpenbookQA", 20, 20))
    # group 1: every pair equivalent, one in four answers changed; group 2: one in two not equivalent
    first = _fill(
        tmp_path / "sheet.csv", tmp_path / "g1.csv", lambda i: ("Yes", "no" if i % 4 == 0 else "yes")
    )
    second = _fill(tmp_path / "sheet.csv", tmp_path / "g2.csv", lambda i: ("No" if i % 2 else "Yes", "Yes"))
    table = table8([first, second]).set_index("dataset")
    assert table.loc["MMLU", "semantic_equivalence"] == pytest.approx(75.0)  # (20 + 10) / 40
    assert table.loc["MMLU", "answer_consistency"] == pytest.approx(100 * 35 / 40)
    assert (table.loc["OpenbookQA", "pairs"], table.loc["OpenbookQA", "answers"]) == (20, 40)


def test_an_unfilled_answer_is_a_one_line_error_naming_file_line_and_column(tmp_path):
    write_sheet(tmp_path / "sheet.csv", _pairs("MMLU", 5, 5))
    filled = _fill(tmp_path / "sheet.csv", tmp_path / "g.csv", lambda i: ("Yes", "" if i == 2 else "No"))
    with pytest.raises(
        StressprobeError, match=r"g\.csv:4: answer_consistency is ''; answer Yes or No"
    ) as error:
        read_sheet(filled)
    assert "\n" not in str(error.value)


def test_unchanged_originals_in_the_perturbed_file_are_no_pairs():
    # cdv.search.failed_originals: include puts the already-failed originals in perturbed.jsonl at depth 0.
    questions = [make_item(f"MMLU-{i}") for i in range(3)]
    perturbed = [{**questions[0], "node_id": "MMLU-0:0", "depth": 0}] + [
        {**q, "node_id": f"{q['qid']}:1", "depth": 1, "question": "Context. " + q["question"]}
        for q in questions[1:]
    ]
    rows = sample_pairs("MMLU", questions, perturbed, 3, seed=0)
    assert sorted(r["perturbed_question"] for r in rows) == sorted(p["question"] for p in perturbed[1:])
