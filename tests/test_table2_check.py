"""The Table 2 check: a run's retrieved personas of one query beside the paper's printed six, by sha256."""

from __future__ import annotations

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.persona.table2 import COLUMNS, normalise, read_expected, sha256, table2_check
from tests.support.helpers import ROOT

SHIPPED = ROOT / "resources" / "paper" / "table2_personas.tsv"
PAPER = ROOT.parent / "shared" / "papers" / "000_d5179d5bafffa11f.txt"


def write_expected(path, printed):
    lines = ["# stand-ins of the same structure", "\t".join(COLUMNS)]
    lines += [f"{s}\t{r}\t{sha256(t)}\t{sha256(normalise(t))}" for (s, r), t in printed.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def record(qid, role, *texts):
    candidates = [{"pid": f"{role}{i}", "text": t, "similarity": 0.5} for i, t in enumerate(texts)]
    return {"qid": qid, "role": role, "persona": texts[0], "pid": f"{role}0", "candidates": candidates}


def test_each_printed_persona_is_found_selected_as_a_candidate_or_not(tmp_path):
    printed = {
        ("hub", "query"): "A baker who loves rye.",
        ("hub", "domain"): "A teacher\u2019s   aide in Ohio.",
        ("hub", "orthogonal"): "A sailor.",
    }
    expected = read_expected(write_expected(tmp_path / "t2.tsv", printed))
    run = {
        "hub": [
            record("q9", "query", "A baker who loves rye."),
            record("q9", "domain", "A librarian.", "A Teacher's aide in Ohio"),
            record("q9", "orthogonal", "A pilot.", "A welder."),
            record("q1", "orthogonal", "A sailor."),  # another query's persona does not count
        ]
    }
    table = table2_check(run, "q9", expected)
    assert table[["role", "match", "text match"]].values.tolist() == [
        ["query", "selected", "exact"],
        ["domain", "candidate 2", "normalised"],
        ["orthogonal", "no", ""],
    ]
    assert table["run persona"].tolist() == ["A baker who loves rye.", "A librarian.", "A pilot."]
    with pytest.raises(StressprobeError, match="query 'q2' has no 'query' persona in the 'hub' pool"):
        table2_check(run, "q2", expected)
    with pytest.raises(StressprobeError, match="the run has no 'hub' pool"):
        table2_check({}, "q9", expected)


def test_the_shipped_file_holds_six_digests_of_the_printed_personas():
    rows = read_expected(SHIPPED)
    assert [(r["source"], r["role"]) for r in rows] == [
        (s, r) for s in ("personahub", "uspersona") for r in ("query", "domain", "orthogonal")
    ]
    if not PAPER.is_file():
        pytest.skip("the paper's text is not on this machine")
    lines = PAPER.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Source\tRole\tExample Persona"))
    texts = [line.split("\t")[2] for line in lines[start + 1 : start + 7]]
    assert [r["printed_sha256"] for r in rows] == [sha256(t) for t in texts]
    assert [r["normalised_sha256"] for r in rows] == [sha256(normalise(t)) for t in texts]
    assert all(t.endswith(".") for t in texts)  # why USPersona texts end with "." under paper.yaml


def test_a_malformed_values_line_names_it(tmp_path):
    path = tmp_path / "bad.tsv"
    path.write_text("\t".join(COLUMNS) + "\nhub\tquery\tnot-a-digest\tx\n")
    with pytest.raises(StressprobeError, match=r"bad.tsv:2: expected 'source role sha256 sha256'"):
        read_expected(path)
