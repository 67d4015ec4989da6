"""Reading a judge's grade from its recorded label distribution, corrected for the model's own label prior.

Batch calibration (BC; Zhou et al., 2023, "Batch Calibration: Rethinking Calibration for In-Context
Learning and Prompt Engineering", ICLR 2024): a model answering one prompt over many inputs has a
contextual prior over the labels, estimated from the batch itself as the mean probability of each label,
p̂(y) = 1/N Σ_i p(y | x_i); the calibrated label of input x_i is argmax_y log p(y | x_i) − log p̂(y), i.e. the
label whose probability most exceeds what the model gives that label anyway. Zero-shot, no labelled data,
no further calls. Here the batch is one judge cell: one model, one prompt and persona condition, all the
judged pairs of a dataset. A small judge that answers "0" to nearly everything still ranks passages by how
much more than usual it leans towards each grade.

Opt-in per judge model (`judging.calibration`); off in config/paper.yaml, whose judges are read as the
paper reads them (the parsed answer). A calibrated record keeps the model's answer (`raw`) and the label
parsed from it (`parsed_label`), and says `label_source: calibrated`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

METHODS = ("none", "batch")


def label_prior(distributions: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """p̂(y): the mean probability of each label over the batch's distributions."""
    labels = sorted({label for dist in distributions for label in dist})
    return {label: sum(d.get(label, 0.0) for d in distributions) / len(distributions) for label in labels}


def calibrated_label(probs: Mapping[str, float], prior: Mapping[str, float]) -> str:
    """argmax over labels of log p(y|x) − log p̂(y).

    Labels with p(y|x) = 0 (outside the recorded top-k) are never chosen; ties go to the higher p(y|x),
    then to the lower grade (a tie between grades is not evidence of relevance).
    """

    def key(label: str) -> tuple[float, float, float]:
        p = probs[label]
        score = math.log(p) - math.log(prior[label]) if p > 0 else -math.inf
        return (score, p, -float(label))

    return max(probs, key=key)


def calibrate_records(records: Sequence[Mapping[str, Any]], method: str) -> list[dict[str, Any]]:
    """The judgment records of one cell with their labels read by `method` (`none` returns them as they are).

    With `batch`, every record that has a label distribution gets the calibrated label (and status `ok`,
    also when its answer could not be parsed); the others (no distribution, failed calls) stay as parsed.
    """
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}")
    if method == "none":
        return [dict(record) for record in records]
    distributions = [r["probs"] for r in records if r["status"] != "error" and r["probs"]]
    if not distributions:
        return [dict(record) for record in records]
    prior = label_prior(distributions)
    out = []
    for record in records:
        if record["status"] == "error" or not record["probs"]:
            out.append(dict(record))
            continue
        label = int(calibrated_label(record["probs"], prior))
        out.append(
            {
                **record,
                "label": label,
                "status": "ok",
                "parsed_label": record["label"],
                "label_source": "calibrated",
            }
        )
    return out
