"""Perturbability classifier C(Q): prompt-based or a logistic regression on sentence embeddings.

Labels come from earlier search outcomes: a question is perturbable when its search found at least one
successful perturbation (depth >= 1). Questions that were not searched (the victim already failed the
original, the classifier filtered it, or the root call failed) carry no label.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np

from stressprobe.cdv.prompts import classifier_messages, parse_yes_no
from stressprobe.cdv.search import ROLES, summarize_search
from stressprobe.llm import Request


def prompt_probabilities(client: Any, questions: list[dict[str, Any]], seed: int) -> dict[str, float]:
    """p = 1 for 'yes' (easy to perturb), 0 for 'no'; an unclear or failed reply gives 1 (never filters).

    Keeping unclear questions means a broken classifier cannot silently shrink the study.
    """
    requests = [
        Request(
            messages=classifier_messages(q["question"], q["choices"]),
            max_tokens=8,
            temperature=0.0,
            seed=seed,
        )
        for q in questions
    ]
    probabilities = {}
    for q, response in zip(questions, client.generate(requests), strict=True):
        verdict = None if response.error else parse_yes_no(response.text)
        probabilities[q["qid"]] = 0.0 if verdict == "no" else 1.0
    return probabilities


def outcome_labels(records: list[dict[str, Any]]) -> dict[str, int]:
    """qid -> 1 if its search found a success at depth >= 1, else 0; unsearched questions are left out."""
    searched = {r["qid"] for r in records if r["depth"] == 0 and r["status"] == "root" and r["flag"] is None}
    found = {r["qid"] for r in records if r["status"] == "success" and r["depth"] > 0}
    return {qid: int(qid in found) for qid in sorted(searched)}


def labelled_rows(cell: dict[str, str], records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per labelled question of a cell's search: the cell's dataset, proxy and victim, qid, label."""
    return [{**cell, "qid": qid, "label": label} for qid, label in outcome_labels(records).items()]


def role_prices(summary: dict[str, Any], prices: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """role -> price of the model a search summary names for that role.

    From the summary, not the cell path: the semantic check may run on `cdv.semantic_model`, not the victim.
    """
    return {role: prices.get(summary[role], {}) for role in ROLES}


def split_keys(keys: list[str], test_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """A seeded split into (train, test); the test part has at least one key when there are two or more."""
    shuffled = sorted(keys)
    random.Random(seed).shuffle(shuffled)
    n_test = min(len(shuffled) - 1, max(1, round(len(shuffled) * test_fraction))) if len(shuffled) > 1 else 0
    return sorted(shuffled[n_test:]), sorted(shuffled[:n_test])


def fit_logit(features: np.ndarray, labels: np.ndarray, max_components: int = 8) -> dict[str, Any]:
    """Logistic regression (statsmodels Logit) on the first principal components of the embeddings.

    384 dimensions and a few hundred questions separate perfectly; projecting onto at most
    `max_components` components (fewer than the training questions) keeps the fit identifiable. When the
    training labels are all equal (or there are fewer than three) the model predicts their rate.
    """
    import statsmodels.api as sm

    if len(labels) < 3 or labels.min() == labels.max():
        return {"params": None, "rate": float(labels.mean()) if len(labels) else 0.5}
    mean = features.mean(axis=0)
    k = min(max_components, len(labels) - 2, features.shape[1])
    _, _, vt = np.linalg.svd(features - mean, full_matrices=False)
    components = vt[:k]
    design = sm.add_constant((features - mean) @ components.T, has_constant="add")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter on tiny or separable data
        result = sm.Logit(labels, design).fit_regularized(method="l1", alpha=1.0, disp=0)
    return {"mean": mean, "components": components, "params": np.asarray(result.params)}


def predict_logit(model: dict[str, Any], features: np.ndarray) -> np.ndarray:
    """Probabilities of being perturbable."""
    if model["params"] is None:
        return np.full(len(features), model["rate"])
    design = np.column_stack([np.ones(len(features)), (features - model["mean"]) @ model["components"].T])
    return 1 / (1 + np.exp(-(design @ model["params"])))


def precision_recall_f(labels: list[int], predicted: list[int], beta: float = 0.5) -> dict[str, float | None]:
    """Precision, recall and F_beta of the positive class (None where undefined)."""
    tp = sum(1 for y, p in zip(labels, predicted, strict=True) if y and p)
    precision = tp / sum(predicted) if sum(predicted) else None
    recall = tp / sum(labels) if sum(labels) else None
    if not precision or not recall:
        return {
            "precision": precision,
            "recall": recall,
            "f_beta": 0.0 if precision == 0 or recall == 0 else None,
        }
    f = (1 + beta**2) * precision * recall / (beta**2 * precision + recall)
    return {"precision": precision, "recall": recall, "f_beta": f}


def filter_effect(
    records: list[dict[str, Any]], keep: set[str], prices: dict[str, dict[str, float]]
) -> dict[str, dict[str, Any]]:
    """Search success rate and cost on all labelled questions vs only those the classifier keeps.

    Counterfactual: the search ran without the filter; "with filter" counts the kept questions' nodes.
    """
    labelled = set(outcome_labels(records))
    result = {}
    for name, qids in (("without_filter", labelled), ("with_filter", labelled & keep)):
        subset = [r for r in records if r["qid"] in qids]
        summary = summarize_search(subset, prices)
        result[name] = {
            "questions": len(qids),
            "success_rate": summary["questions_with_success"] / len(qids) if qids else None,
            "requests_total": summary["requests_total"],
            "tokens_total": summary["tokens_total"],
            "cost_usd": summary["cost_usd"],
            "requests_per_success": summary["requests_per_success"],
            "cost_per_perturbed_question_usd": summary["cost_per_perturbed_question_usd"],
        }
    return result


def cell_filter_effect(
    cell: dict[str, str],
    records: list[dict[str, Any]],
    test_rows: list[dict[str, Any]],
    test_qids: set[str],
    prices: dict[str, dict[str, float]],
) -> dict[str, dict[str, Any]]:
    """`filter_effect` of one cell on its held-out questions, keeping what the classifier kept for the cell's
    dataset and victim (p depends on the question and the victim, never on the proxy)."""
    keep = {
        r["qid"]
        for r in test_rows
        if r["keep"] and r["dataset"] == cell["dataset"] and r["victim"] == cell["victim"]
    }
    return filter_effect([r for r in records if r["qid"] in test_qids], keep, prices)
