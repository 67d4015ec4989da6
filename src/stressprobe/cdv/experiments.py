"""The CDV study's experiments as search cells: which (proxy, victim) pairs are searched, on how many of a
dataset's questions, evaluated by which models; and the question sets of the classifier's cost experiment.

`cdv.cells` (the plain grid) and `cdv.experiments` (named views: self-search on 100 questions, the
scale-up on 300, ...) describe the same kind of thing. A (proxy, victim) pair is searched once, on the
largest sample any of its experiments asks for: samples are nested (`nested_sample`), so the 100-question
set is part of the 300-question one and the search of a question does not depend on the other questions.
An experiment's tables keep only its own sample's questions (`experiment_qids`).
"""

from __future__ import annotations

import random
from typing import Any

# The cost experiment (Table 3) searches two question sets per dataset, kept apart from the study's
# datasets by a suffix: `MMLU.selected` (the filtering classifier keeps them) and `MMLU.random`; with a
# fine-tuned classifier filtering, `MMLU.minilm` (the MiniLM classifier keeps them) can be a third.
SELECTIONS = ("selected", "random")
MINILM = "minilm"
# Table 3's rows by selection.
SELECTION_ROWS = {"selected": "with_filter", "random": "without_filter", MINILM: "with_filter_minilm"}


def nested_sample(items: list[dict[str, Any]], n: int | None, seed: int) -> list[dict[str, Any]]:
    """`n` items of a seeded permutation's first positions, in the input order; all when `n` is None.

    Nested: with the same seed and input, the sample of n is part of the sample of every m >= n.
    """
    if n is None or n >= len(items):
        return list(items)
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    return [items[i] for i in sorted(order[:n])]


def _merge_n(a: int | None, b: int | None) -> int | None:
    """The larger sample; None (all questions) is larger than any number."""
    return None if a is None or b is None else max(a, b)


def cell_specs(cdv: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(proxy, victim) -> {"n": questions searched (None = all), "eval_models": [...], "experiments": [...]}.

    From `cdv.cells` (experiment "cells") and every experiment of `cdv.experiments`; a pair named by
    several gets the largest n and the union of their evaluated models, in first-seen order.
    """
    specs: dict[tuple[str, str], dict[str, Any]] = {}
    sources = [("cells", {"n": None, "eval_models": None, "cells": cdv["cells"]})]
    sources += sorted(cdv.get("experiments", {}).items())
    for name, experiment in sources:
        for cell in experiment["cells"]:
            key = (cell["proxy"], cell["victim"])
            n = cell.get("n") if name == "cells" else experiment["n"]
            models = experiment.get("eval_models") or cdv["eval_models"] or [cell["victim"]]
            if key not in specs:
                specs[key] = {"n": n, "eval_models": list(models), "experiments": [name]}
                continue
            spec = specs[key]
            spec["n"] = _merge_n(spec["n"], n)
            spec["eval_models"] += [m for m in models if m not in spec["eval_models"]]
            spec["experiments"].append(name)
    return specs


def experiment_qids(questions: list[dict[str, Any]], n: int | None, seed: int) -> set[str]:
    """The qids of an experiment's sample of one dataset's questions (the same `nested_sample`)."""
    return {q["qid"] for q in nested_sample(questions, n, seed)}


def selection_dataset(dataset: str, selection: str) -> str:
    return f"{dataset}.{selection}"


def select_questions(pool: list[dict[str, Any]], n: int, threshold: float, seed: int) -> dict[str, list[str]]:
    """The cost experiment's two question sets from one dataset's pool (the questions the classifier did not train on: rows with qid and p).

    selected: n questions drawn at random among those the classifier keeps (p >= threshold; all kept ones
    when fewer); random: n questions drawn from the whole pool. Seeded, independent draws.
    """
    kept = sorted(r["qid"] for r in pool if r["p"] >= threshold)
    everyone = sorted(r["qid"] for r in pool)
    rng_selected, rng_random = random.Random(f"{seed}/selected"), random.Random(f"{seed}/random")
    return {
        "selected": sorted(rng_selected.sample(kept, min(n, len(kept)))),
        "random": sorted(rng_random.sample(everyone, min(n, len(everyone)))),
    }


def file_name(model_id: str) -> str:
    """A Hugging Face model id as one file name (`org/model` -> `org__model`)."""
    return model_id.replace("/", "__")
