"""Appendix A.2's depth and length shares and section 4.3's wasted share from the search logs."""

from __future__ import annotations

import pytest

from stressprobe.cdv.paper_report import read_paper_values, vs_paper_table
from stressprobe.cdv.search_shares import search_share_rows
from stressprobe.io import write_jsonl
from tests.support.helpers import ROOT


def _node(qid, depth, status, length_ratio=1.0, calls=None, flag=None):
    return {
        "qid": qid,
        "depth": depth,
        "status": status,
        "length_ratio": length_ratio,
        "calls": calls,
        "flag": flag,
    }


def _write(tmp_path, dataset, records):
    path = tmp_path / "results/cdv" / dataset / "p" / "v" / "search.jsonl"
    path.parent.mkdir(parents=True)
    write_jsonl(path, records)
    return str(path)


def test_the_shares_count_successes_at_depth_one_or_more_and_the_calls_of_unperturbed_questions(tmp_path):
    mmlu = [
        _node("q1", 0, "root", calls=30),
        _node("q1", 1, "success", length_ratio=2.0),
        _node("q1", 5, "success", length_ratio=4.0),
        _node("q1", 6, "success", length_ratio=8.0),
        _node("q1", 2, "queued", length_ratio=9.0),  # not a success: not counted
        _node("q2", 0, "root", calls=10),  # searched, never perturbed: its 10 calls are wasted
        _node("q2", 1, "pruned_all_correct"),
        _node("q3", 0, "success", calls=1, flag="victim_fails_original"),  # not searched
        _node("q5", 0, "error", calls=1),  # its original got no answer: not searched, not wasted
    ]
    obqa = [_node("q4", 0, "root", calls=20), _node("q4", 3, "success", length_ratio=6.0)]
    rows = search_share_rows([_write(tmp_path, "MMLU", mmlu), _write(tmp_path, "OpenbookQA", obqa)])
    got = {(r["experiment"], r["dataset"], r["column"]): r["value"] for r in rows}
    assert got[("distribution", "MMLU", "share_depth_le_3")] == pytest.approx(1 / 3)
    assert got[("distribution", "MMLU", "share_depth_ge_5")] == pytest.approx(2 / 3)
    assert got[("distribution", "MMLU", "share_length_ratio_le_3")] == pytest.approx(1 / 3)
    assert got[("distribution", "MMLU", "share_length_ratio_gt_5")] == pytest.approx(1 / 3)
    assert got[("distribution", "OpenbookQA", "share_length_ratio_gt_5")] == 1.0
    assert got[("classifier_study", "all", "wasted_share")] == pytest.approx(10 / 60)
    assert all(r["model"] == "all" for r in rows)


def test_every_published_share_has_its_run_cell(tmp_path):
    datasets = ("MMLU", "CommonsenseQA", "OpenbookQA", "TruthfulQA")
    paths = [
        _write(tmp_path, d, [_node("q", 0, "root", calls=4), _node("q", 2, "success", length_ratio=3.5)])
        for d in datasets
    ]
    paper = read_paper_values(ROOT / "resources/cdv/paper_values.csv")
    table = vs_paper_table(paper, search_share_rows(paths))
    placed = table[table["table"].isin(["Appendix A.2"]) | (table["column"] == "wasted_share")]
    assert len(placed) == 6 and placed["run"].notna().all()
