"""The classifier study from the authors' released labels instead of new searches (Table 7).

The release (github.com/wyf23187/LLM_CDV at 0a1acbd, `train/train_data.json`, 1,080 questions, and
`train/valid_data.json`, 120: section 4.3's "1,080 annotated samples with 120 held-out test cases") holds
instruction-tuning records: `instruction` = a fixed question ("... too simple to be enhanced:"), the
question after `Question: ` and its options after `Choices: ` (a Python list literal), `output` = Yes or No.

Polarity: Table 7's Baseline row (no classifier: every question kept, so recall 1 and precision = the share
of positives) prints precision 0.558 on the 120 test cases; `valid_data.json` has 67 Yes and 53 No, and
67 / 120 = 0.558 (53 / 120 = 0.442). So the positive class, easy to perturb, is the released `Yes`.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import numpy as np

from stressprobe.cdv.classifier import NO_CLASSIFIER, TRAINED, fit_logit, precision_recall_f, predict_logit
from stressprobe.errors import StressprobeError

# The released answer that marks a question easy to perturb (see the module docstring for why).
POSITIVE = "Yes"
LABELS = {"Yes", "No"}
QUESTION, CHOICES = "\nQuestion: ", "\nChoices: "


def read_release_labels(path: str | Path) -> list[dict[str, Any]]:
    """(question, choices, label) of one released file; a record of another shape is a one-line error."""
    path = Path(path)
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise StressprobeError(f"{path}: not a released label file ({exc})") from None
    if not isinstance(records, list):
        raise StressprobeError(f"{path}: expected a JSON list of instruction records")
    rows = []
    for i, record in enumerate(records):
        where = f"{path}: record {i}"
        instruction = record.get("instruction", "") if isinstance(record, dict) else ""
        if QUESTION not in instruction or CHOICES not in instruction:
            raise StressprobeError(f"{where}: no 'Question:'/'Choices:' lines in its instruction")
        if record.get("output") not in LABELS:
            raise StressprobeError(f"{where}: output {record.get('output')!r} is not Yes or No")
        question, _, choices = instruction.split(QUESTION, 1)[1].partition(CHOICES)
        try:
            options = ast.literal_eval(choices.strip())  # a literal only: nothing is executed
        except (ValueError, SyntaxError):
            raise StressprobeError(f"{where}: its Choices are not a list literal") from None
        rows.append(
            {
                "qid": f"{path.stem}/{i}",
                "question": question.strip(),
                "choices": list(options),
                "label": int(record["output"] == POSITIVE),
            }
        )
    return rows


def release_rows(
    train: list[dict[str, Any]], test: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The released split as the study's labelled rows (qid, label, split train | test) and qid -> question:
    what a LoRA classifier trains and is scored on (stressprobe.cdv.lora_classifier)."""
    rows = [{"qid": r["qid"], "label": r["label"], "split": "train"} for r in train]
    rows += [{"qid": r["qid"], "label": r["label"], "split": "test"} for r in test]
    return rows, {r["qid"]: r for r in train + test}


def release_study(
    train: list[dict[str, Any]],
    test: list[dict[str, Any]],
    embed: Any,
    threshold: float,
    prompt_scores: dict[str, dict[str, float]] | None = None,
) -> dict[str, Any]:
    """Table 7 on the released split: the no-classifier baseline, the MiniLM + logistic regression classifier
    trained on the 1,080 released training labels, and each prompt classifier of `prompt_scores` (model ->
    qid -> p; a question without a score is kept), all scored on the 120 test labels."""
    labels = [r["label"] for r in test]
    vectors = np.asarray(embed([r["question"] for r in train + test]))
    model = fit_logit(vectors[: len(train)], np.array([r["label"] for r in train]))
    p = predict_logit(model, vectors[len(train) :])
    kept = {NO_CLASSIFIER: [1] * len(test), TRAINED: [int(x >= threshold) for x in p]}
    for name, scores in sorted((prompt_scores or {}).items()):
        kept[f"prompt:{name}"] = [int(scores.get(r["qid"], 1.0) >= threshold) for r in test]
    return {
        "labels": "release",
        "n_train": len(train),
        "positives_train": sum(r["label"] for r in train),
        "study": {
            name: {"test": {"n": len(test), "positives": sum(labels), **precision_recall_f(labels, keep)}}
            for name, keep in kept.items()
        },
    }
