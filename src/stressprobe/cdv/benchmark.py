"""A CDV benchmark without a search: any model evaluated on a file of perturbed questions (the DPO held-out
split, the authors' released `train/dpo_test.json`, a run's `perturbed.jsonl`, or any file of the same
shape), giving accuracies comparable with Table 5's Orig. column.

Two record shapes are read: the project's (`question`, `choices`, `answer_index`) and the authors' release
(`question`, `choices`, `ground_truth` = the text of the right choice, `source`, `unique_id`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stressprobe.errors import StressprobeError


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line or position, record) of a JSON list or a JSONL file."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            return list(enumerate(json.loads(text), start=1))
        except json.JSONDecodeError as exc:
            raise StressprobeError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise StressprobeError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
    return records


def _answer_index(where: str, record: dict[str, Any]) -> int:
    if "answer_index" in record:
        index = record["answer_index"]
        if not isinstance(index, int) or not 0 <= index < len(record["choices"]):
            raise StressprobeError(f"{where}: answer_index {index!r} is not a position in its choices")
        return index
    if "ground_truth" in record:
        if record["ground_truth"] not in record["choices"]:
            raise StressprobeError(
                f"{where}: ground_truth is not one of its choices (the text of the right choice)"
            )
        return record["choices"].index(record["ground_truth"])
    raise StressprobeError(
        f"{where}: no answer_index or ground_truth; give the right choice's position or text"
    )


def read_benchmark(path: str | Path) -> list[dict[str, Any]]:
    """The questions of a benchmark file as evaluation items (qid, node_id, question, choices, answer_index,
    condition `perturbed`); a record without what is needed is a one-line error naming its line."""
    path = Path(path)
    if not path.is_file():
        raise StressprobeError(f"{path}: no such benchmark file (cdv.benchmark.files)")
    items = []
    for number, record in _records(path):
        where = f"{path}:{number}"
        if not isinstance(record, dict):
            raise StressprobeError(f"{where}: a record must be a JSON object")
        missing = [k for k in ("question", "choices") if k not in record]
        if missing:
            raise StressprobeError(f"{where}: missing {', '.join(missing)}")
        if not isinstance(record["choices"], list) or len(record["choices"]) < 2:
            raise StressprobeError(f"{where}: choices must be a list of at least two options")
        qid = record.get("group") or record.get("qid")
        if qid is None and "unique_id" in record:
            qid = f"{record.get('source', 'release')}/{record['unique_id']}"
        items.append(
            {
                "qid": str(qid if qid is not None else number),
                "node_id": record.get("node_id", f"{path.stem}:{number}"),
                "condition": "perturbed",
                "question": record["question"],
                "choices": record["choices"],
                "answer_index": _answer_index(where, record),
                "source": record.get("source") or (str(qid).split("/")[0] if qid else None),
            }
        )
    if not items:
        raise StressprobeError(f"{path}: no questions")
    return items
