"""Multiple-choice questions of the CDV study: loading, validation, seeded sampling and choice shuffling.

A question record (the shape of `results/cdv/data/{dataset}.jsonl`):
`{"qid", "question", "choices": [...], "answer_index", "answer", "source", "subject"?}`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path
from typing import Any

from stressprobe.errors import StressprobeError
from stressprobe.io import read_text_lines

log = logging.getLogger(__name__)

# Hugging Face datasets (the study's sources), each converted to {question, choices, answer, subject?}.
HF_ADAPTERS = {
    "cais/mmlu": lambda row: {
        "question": row["question"],
        "choices": list(row["choices"]),
        "answer": row["choices"][row["answer"]],
        "subject": row.get("subject"),
    },
    "tau/commonsense_qa": lambda row: {
        "question": row["question"],
        "choices": list(row["choices"]["text"]),
        "answer": row["choices"]["text"][row["choices"]["label"].index(row["answerKey"])],
    },
    "allenai/openbookqa": lambda row: {
        "question": row["question_stem"],
        "choices": list(row["choices"]["text"]),
        "answer": row["choices"]["text"][row["choices"]["label"].index(row["answerKey"])],
    },
    "truthfulqa/truthful_qa": lambda row: {
        "question": row["question"],
        "choices": list(row["mc1_targets"]["choices"]),
        "answer": row["mc1_targets"]["choices"][row["mc1_targets"]["labels"].index(1)],
    },
}


def read_question_file(path: str | Path) -> list[tuple[str, Any]]:
    """Read a JSON list or a JSONL file of raw items; returns `(location, item)` pairs."""
    path = Path(path)
    if path.suffix == ".jsonl":
        items = []
        for lineno, line in read_text_lines(path):
            if line.strip():
                items.append((f"{path}:{lineno}", _parse_json(line, f"{path}:{lineno}")))
        return items
    text = "\n".join(line for _, line in read_text_lines(path))
    data = _parse_json(text, str(path))
    if not isinstance(data, list):
        raise StressprobeError(f"{path}: expected a JSON list of questions (or a .jsonl file); fix the file")
    return [(f"{path}[{i}]", item) for i, item in enumerate(data)]


def _parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StressprobeError(
            f"{where}: not valid JSON ({exc.msg} at line {exc.lineno}); fix the file"
        ) from None


def load_hf_questions(hf_dataset: str, config_name: str | None, split: str) -> list[tuple[str, Any]]:
    """Load one of the study's datasets from Hugging Face `datasets` (imported only when asked for)."""
    if hf_dataset not in HF_ADAPTERS:
        known = ", ".join(sorted(HF_ADAPTERS))
        raise StressprobeError(
            f"cdv.datasets: unknown hf_dataset '{hf_dataset}' (known: {known}); or use 'path'"
        )
    try:
        import datasets
    except ImportError:
        raise StressprobeError(
            f"cdv.datasets: hf_dataset '{hf_dataset}' needs the 'datasets' package; "
            "install stressprobe[download] or give a local 'path'"
        ) from None
    rows = datasets.load_dataset(hf_dataset, config_name, split=split)
    adapt = HF_ADAPTERS[hf_dataset]
    return [(f"{hf_dataset}[{i}]", adapt(row)) for i, row in enumerate(rows)]


def question_id(dataset: str, item: dict[str, Any]) -> str:
    """A stable id: the item's own `id` when it has one, else a hash of its question, choices and answer."""
    if item.get("id") not in (None, ""):
        return str(item["id"])
    content = json.dumps([item["question"], item["choices"], item["answer"]], ensure_ascii=False)
    return f"{dataset}-{hashlib.sha1(content.encode('utf-8')).hexdigest()[:10]}"


def validate_item(where: str, item: Any) -> dict[str, Any]:
    """Check one raw item and return it normalised; a bad item is a one-line error naming it.

    Identical choice texts are merged (the same option listed twice, as in a few CommonsenseQA items), so
    that the correct answer is one letter.
    """
    if not isinstance(item, dict):
        raise StressprobeError(f"{where}: expected an object with question, choices, answer; fix the item")
    question, choices, answer = item.get("question"), item.get("choices"), item.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise StressprobeError(f"{where}: 'question' is missing or empty; give the question text")
    if not isinstance(choices, list) or not all(isinstance(c, str) and c.strip() for c in choices):
        raise StressprobeError(f"{where}: 'choices' must be a list of non-empty strings; fix the item")
    unique = list(dict.fromkeys(choices))
    if len(unique) < 2:
        raise StressprobeError(
            f"{where}: question {question[:60]!r} has fewer than 2 distinct choices; fix or drop it"
        )
    if not isinstance(answer, str) or answer not in unique:
        raise StressprobeError(
            f"{where}: the answer {answer!r} of question {question[:60]!r} is not among its choices; "
            "'answer' must be the exact text of the correct choice"
        )
    if len(unique) < len(choices):
        log.warning("%s: merged duplicate choices of question %r", where, question[:60])
    normalised = {"question": question, "choices": unique, "answer": answer}
    for key in ("id", "subject", "source"):
        if item.get(key) is not None:
            normalised[key] = item[key]
    return normalised


def validate_items(dataset: str, raw: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Validate every item and give each its qid; duplicate qids are an error naming both places."""
    seen: dict[str, str] = {}
    items = []
    for where, item in raw:
        record = validate_item(where, item)
        qid = question_id(dataset, record)
        if qid in seen:
            raise StressprobeError(
                f"{where}: duplicate question id {qid!r} (also at {seen[qid]}); "
                "remove the duplicate or give unique ids"
            )
        seen[qid] = where
        items.append({"qid": qid, **{k: v for k, v in record.items() if k != "id"}})
    return items


def sample_items(
    items: list[dict[str, Any]], n: int | list[str] | None, seed: int, dataset: str = ""
) -> list[dict[str, Any]]:
    """A seeded sample of `n` items (all when `n` is None or larger), in the source file's order.

    A list `n` names the questions by qid instead (e.g. a demo's hand-picked questions); an unknown qid is
    a config error naming it.
    """
    if isinstance(n, list):
        wanted = set(map(str, n))
        missing = sorted(wanted - {item["qid"] for item in items})
        if missing:
            raise StressprobeError(
                f"config key 'cdv.datasets.{dataset}.n': no question with qid {', '.join(missing[:5])}; "
                "use the qids of results/cdv/data/<dataset>.jsonl (or the items' `id`)"
            )
        return [item for item in items if item["qid"] in wanted]
    if n is None or n >= len(items):
        return list(items)
    chosen = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in chosen]


def shuffle_choices(item: dict[str, Any], seed: int) -> dict[str, Any]:
    """Shuffle the choices with an RNG seeded by (seed, qid), independent of the sample.

    Needed because some sources list the correct answer first (TruthfulQA mc1).
    """
    rng = random.Random(f"{seed}:{item['qid']}")
    choices = list(item["choices"])
    rng.shuffle(choices)
    record = {**item, "choices": choices, "answer_index": choices.index(item["answer"])}
    return record


def prepare_questions(
    dataset: str,
    path: str | None,
    hf_dataset: str | None,
    hf_config: str | None,
    hf_split: str,
    n: int | list[str] | None,
    seed: int,
    shuffle: bool = True,
) -> list[dict[str, Any]]:
    """Load (local file or Hugging Face), validate, sample `n` (or take the listed qids) and shuffle choices
    (unless `shuffle` is off: then the source's order, with `answer_index` set)."""
    if path:
        raw = read_question_file(path)
    elif hf_dataset:
        raw = load_hf_questions(hf_dataset, hf_config, hf_split)
    else:
        raise StressprobeError(f"cdv.datasets.{dataset}: give either 'path' or 'hf_dataset'")
    items = validate_items(dataset, raw)
    if not items:
        raise StressprobeError(
            f"cdv.datasets.{dataset}: the source has no questions; check 'path'/'hf_dataset'"
        )
    sample = sample_items(items, n, seed, dataset)
    if not shuffle:
        return [{**item, "answer_index": item["choices"].index(item["answer"])} for item in sample]
    return [shuffle_choices(item, seed) for item in sample]
