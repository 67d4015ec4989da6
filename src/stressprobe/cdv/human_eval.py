"""The human evaluation of Appendix B: a spreadsheet (CSV) of original/perturbed question pairs for people
to fill, and the reader that turns filled sheets into Table 8.

Appendix B: 200 pairs per dataset enhanced by GPT-4o-mini; two yes/no questions per pair: (1) are Q and Q'
semantically equivalent, (2) does the answer of Q' stay the original answer. Several sheets (the paper's
two groups of raters) are pooled: a percentage is the share of Yes among every answer given.
"""

from __future__ import annotations

import csv
import io
import random
from pathlib import Path
from typing import Any

import pandas as pd

from stressprobe.errors import StressprobeError
from stressprobe.io import atomic_write

QUESTIONS = {
    "semantic_equivalence": "Are the original and the perturbed question semantically equivalent? (Yes/No)",
    "answer_consistency": "Does the perturbed question keep the original question's answer? (Yes/No)",
}
COLUMNS = ["pair_id", "dataset", "original_question", "perturbed_question", "choices", "answer", *QUESTIONS]
ANSWERS = {"yes": 1, "no": 0}


def sample_pairs(
    dataset: str, questions: list[dict[str, Any]], perturbed: list[dict[str, Any]], n: int, seed: int
) -> list[dict[str, Any]]:
    """`n` seeded (original, perturbed) pairs of one dataset, one row each with the answer columns blank."""
    by_qid = {q["qid"]: q for q in questions}
    # An unchanged original (cdv.search.failed_originals: include) is no pair to judge.
    pool = sorted(
        (p for p in perturbed if p["qid"] in by_qid and p.get("depth", 1) > 0), key=lambda p: p["node_id"]
    )
    chosen = random.Random(f"{seed}/{dataset}").sample(pool, min(n, len(pool)))
    return [
        {
            "pair_id": f"{dataset}/{p['node_id']}",
            "dataset": dataset,
            "original_question": by_qid[p["qid"]]["question"],
            "perturbed_question": p["question"],
            "choices": " | ".join(p["choices"]),
            "answer": p["choices"][p["answer_index"]],
            **dict.fromkeys(QUESTIONS, ""),
        }
        for p in sorted(chosen, key=lambda p: p["node_id"])
    ]


def write_sheet(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """The sheet (CSV, one header line naming both questions in the column titles' order), atomically."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, out.getvalue())


def read_sheet(path: str | Path) -> list[dict[str, Any]]:
    """A filled sheet's rows with the answers as 1 (Yes) / 0 (No); a blank or other answer is a one-line
    error naming the file, line and column."""
    path = Path(path)
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ("pair_id", "dataset", *QUESTIONS) if c not in (reader.fieldnames or [])]
        if missing:
            raise StressprobeError(f"{path}: missing column(s) {', '.join(missing)}; fill the exported sheet")
        rows = []
        for line, row in enumerate(reader, start=2):
            answers = {}
            for column in QUESTIONS:
                answer = (row[column] or "").strip().lower()
                if answer not in ANSWERS:
                    raise StressprobeError(
                        f"{path}:{line}: {column} is {row[column]!r}; answer Yes or No for pair {row['pair_id']}"
                    )
                answers[column] = ANSWERS[answer]
            rows.append({"pair_id": row["pair_id"], "dataset": row["dataset"], **answers})
    if not rows:
        raise StressprobeError(f"{path}: no filled rows")
    return rows


def table8(paths: list[str | Path]) -> pd.DataFrame:
    """Table 8: per dataset, the percentage of Yes to each question over every filled sheet, and the
    number of pairs and answers behind it."""
    rows = [row for path in paths for row in read_sheet(path)]
    table = pd.DataFrame(rows)
    grouped = table.groupby("dataset")
    result = grouped[list(QUESTIONS)].mean().mul(100)
    result["pairs"] = grouped["pair_id"].nunique()
    result["answers"] = grouped.size()
    return result.reset_index()
