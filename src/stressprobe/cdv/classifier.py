"""Perturbability classifier C(Q): prompt-based or a logistic regression on sentence embeddings.

Labels come from earlier search outcomes: a question is perturbable when its search found at least one
successful perturbation (depth >= 1). Questions that were not searched (the classifier filtered it, or the
root call failed) carry no label; an original the victim already failed carries none either, or a positive
one with `cdv.classifier.failed_originals: positive` (the authors' labels).
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np

from stressprobe.cdv.prompts import classifier_messages, parse_yes_no
from stressprobe.cdv.search import ROLES, summarize_search
from stressprobe.llm import Request
from stressprobe.scoring import UNANSWERED, is_unanswered


def prompt_answers(client: Any, questions: list[dict[str, Any]], seed: int) -> dict[str, float | None]:
    """p = 0 for 'no' (hard to perturb), 1 for 'yes' or an unclear reply, None where the call failed (no
    answer: the study's metrics leave it out, stressprobe.scoring).

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
    answers: dict[str, float | None] = {}
    for q, response in zip(questions, client.generate(requests), strict=True):
        answers[q["qid"]] = None if response.error else 0.0 if parse_yes_no(response.text) == "no" else 1.0
    return answers


def prompt_probabilities(client: Any, questions: list[dict[str, Any]], seed: int) -> dict[str, float]:
    """`prompt_answers` as the search's filter reads them: a failed reply gives 1 (never filters)."""
    return {qid: 1.0 if p is None else p for qid, p in prompt_answers(client, questions, seed).items()}


def outcome_labels(records: list[dict[str, Any]], failed_originals: str = "drop") -> dict[str, int]:
    """qid -> 1 if its search found a success at depth >= 1, else 0; unsearched questions are left out, and
    so are originals the victim already fails unless `failed_originals` is `positive` (the authors'
    train/merge_data.py:26 labels every question with a good question Yes, such an original included)."""
    searched = {r["qid"] for r in records if r["depth"] == 0 and r["status"] == "root" and r["flag"] is None}
    found = {r["qid"] for r in records if r["status"] == "success" and r["depth"] > 0}
    if failed_originals == "positive":
        failed = {r["qid"] for r in records if r["flag"] == "victim_fails_original"}
        searched, found = searched | failed, found | failed
    return {qid: int(qid in found) for qid in sorted(searched)}


def labelled_rows(
    cell: dict[str, str], records: list[dict[str, Any]], failed_originals: str = "drop"
) -> list[dict[str, Any]]:
    """One row per labelled question of a cell's search: the cell's dataset, proxy and victim, qid, label."""
    labels = outcome_labels(records, failed_originals)
    return [{**cell, "qid": qid, "label": label} for qid, label in labels.items()]


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
    A question whose original got no answer has no label: in neither rate, counted (`unanswered`).
    """
    labelled = set(outcome_labels(records))
    failed = {r["qid"] for r in records if r["depth"] == 0 and is_unanswered(r)}
    result = {}
    for name, qids in (("without_filter", labelled), ("with_filter", labelled & keep)):
        subset = [r for r in records if r["qid"] in qids]
        summary = summarize_search(subset, prices)
        result[name] = {
            "questions": len(qids),
            UNANSWERED: len(failed if name == "without_filter" else failed & keep),
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


# ---- the classifier study (Table 7, Figure 5) ----

NO_CLASSIFIER = "none"
TRAINED = "trained"


def study_splits(
    keys: list[str], validation_fraction: float, test_fraction: float, seed: int
) -> dict[str, str]:
    """key -> train, validation or test: the test part as `split_keys`, then validation from the rest.

    Fractions are of all keys; with validation_fraction 0 the split is `split_keys`'s exactly.
    """
    train, test = split_keys(keys, test_fraction, seed)
    validation: list[str] = []
    if validation_fraction > 0 and len(train) > 1:
        train, validation = split_keys(train, validation_fraction / (1 - test_fraction), seed + 1)
    return {
        **{k: "train" for k in train},
        **{k: "validation" for k in validation},
        **{k: "test" for k in test},
    }


def trained_scores(
    vectors: dict[str, np.ndarray], labels: dict[str, list[int]], train_qids: set[str]
) -> dict[str, float]:
    """p for every qid of `vectors` from a logistic regression fitted on the training qids' labels (one
    training row per labelled (cell, question), so a question searched for several victims counts for each)."""
    train = [(qid, y) for qid in sorted(train_qids) for y in labels.get(qid, [])]
    model = fit_logit(np.array([vectors[q] for q, _ in train]), np.array([y for _, y in train]))
    qids = sorted(vectors)
    if not qids:
        return {}
    predicted = predict_logit(model, np.array([vectors[q] for q in qids]))
    return {q: float(p) for q, p in zip(qids, predicted, strict=True)}


def classifier_metrics(
    rows: list[dict[str, Any]], scores: dict[str, float | None], threshold: float
) -> dict[str, dict[str, Any]]:
    """Per split: questions, positives, precision, recall and F0.5 of keeping p >= threshold; a question
    whose score is None (a prompt classifier's failed call) is not scored, only counted (`unanswered`)."""
    result = {}
    for split in ("train", "validation", "test"):
        part = [r for r in rows if r["split"] == split]
        if not part:
            continue
        scored = [r for r in part if scores.get(r["qid"], 1.0) is not None]
        labels = [r["label"] for r in scored]
        kept = [int(scores.get(r["qid"], 1.0) >= threshold) for r in scored]
        result[split] = {
            "n": len(scored),
            "positives": sum(labels),
            **precision_recall_f(labels, kept),
            UNANSWERED: len(part) - len(scored),
        }
    return result


def classifier_study(
    rows: list[dict[str, Any]],
    splits: dict[str, str],
    vectors: dict[str, np.ndarray] | None,
    prompt_scores: dict[str, dict[str, float | None]],
    threshold: float,
) -> tuple[dict[str, dict[str, float | None]], dict[str, dict[str, Any]]]:
    """Every classifier of the study scored on the same labelled rows and splits.

    `rows`: one per (cell, qid) with `label`; `vectors`: qid -> embedding of every labelled question (None =
    no trained classifier); `prompt_scores`: model -> qid -> p (None: no answer). Returns (classifier ->
    qid -> p, classifier -> split -> metrics). The no-classifier baseline keeps every question (recall 1,
    precision = base rate).
    """
    labelled = {r["qid"] for r in rows}
    for row in rows:
        row["split"] = splits[row["qid"]]
    scores: dict[str, dict[str, float | None]] = {NO_CLASSIFIER: dict.fromkeys(sorted(labelled), 1.0)}
    if vectors is not None:
        labels: dict[str, list[int]] = {}
        for row in rows:
            labels.setdefault(row["qid"], []).append(row["label"])
        train_qids = {q for q in labelled if splits[q] == "train"}
        scores[TRAINED] = trained_scores(vectors, labels, train_qids)
    for model, found in sorted(prompt_scores.items()):
        scores[f"prompt:{model}"] = found
    metrics = {name: classifier_metrics(rows, found, threshold) for name, found in scores.items()}
    return scores, metrics


def run_classifier(
    cells: list[tuple[dict[str, str], list[dict[str, Any]], dict[str, Any]]],
    questions: dict[str, dict[str, Any]],
    settings: dict[str, Any],
    seed: int,
    embed: Any,
    ask: Any,
    prices: dict[str, dict[str, float]],
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """The classifier job: the configured classifier (`kind`) with its filter effect, the study's classifiers
    (Table 7) on the same splits, and the unlabelled questions scored by the configured classifier.

    cells: (cell, search records, search summary) of each label cell; questions: qid -> question of every
    dataset's sample; embed(texts) -> vectors; ask(model, [question]) -> qid -> p (prompt classifier).
    Returns (one row per labelled (cell, qid), the metrics document, the scored pool).
    """
    threshold = settings["threshold"]
    failed = settings.get("failed_originals", "drop")
    rows = [row for cell, records, _ in cells for row in labelled_rows(cell, records, failed)]
    qids = sorted({r["qid"] for r in rows})
    splits = study_splits(qids, settings["validation_fraction"], settings["test_fraction"], seed)
    # The pool: every question the classifier did not train on (its validation and test splits, and the
    # questions no label cell labelled). With the authors' 300-question files the scale-up labels all of
    # them, so "the questions no label cell searched" would leave the cost experiment nothing to draw.
    pool_qids = sorted(set(questions) - {q for q, split in splits.items() if split == "train"})
    vectors = None
    if settings["kind"] == "trained" or settings["prompt_models"]:
        embedded = sorted(set(qids) | (set(pool_qids) if settings["kind"] == "trained" else set()))
        vectors = dict(zip(embedded, embed([questions[q]["question"] for q in embedded]), strict=True))
    prompt_scores = {model: ask(model, [questions[q] for q in qids]) for model in settings["prompt_models"]}
    scores, study = classifier_study(rows, splits, vectors, prompt_scores, threshold)
    # The configured classifier: p per row (the prompt classifier of `model` or of each row's victim).
    if settings["kind"] == "prompt":
        by_model: dict[str, set[str]] = {}
        for row in rows:
            by_model.setdefault(settings["model"] or row["victim"], set()).add(row["qid"])
        asked = {m: ask(m, [questions[q] for q in sorted(found)]) for m, found in sorted(by_model.items())}
        for row in rows:
            p = asked[settings["model"] or row["victim"]][row["qid"]]
            # A failed call keeps the question (as the search's filter does) but is not scored.
            row["p"], row[UNANSWERED] = (1.0, True) if p is None else (p, False)
        pool_scores = (
            ask(settings["model"], [questions[q] for q in pool_qids])
            if settings["model"] and pool_qids
            else {}
        )
        pool_scores = {q: 1.0 if p is None else p for q, p in pool_scores.items()}
    else:
        chosen = scores.get(TRAINED if settings["kind"] == "trained" else NO_CLASSIFIER, {})
        for row in rows:
            row["p"], row[UNANSWERED] = chosen.get(row["qid"], 1.0), False
        pool_scores = chosen
    for row in rows:
        row["keep"] = row["p"] >= threshold
    test_qids = {q for q, split in splits.items() if split == "test"}
    test = [r for r in rows if r["split"] == "test"]
    scored = [r for r in test if not r[UNANSWERED]]
    metrics = {
        "kind": settings["kind"],
        "threshold": threshold,
        "n_train": len(rows) - len(test),
        "n_test": len(scored),
        f"{UNANSWERED}_test": len(test) - len(scored),
        "positives_test": sum(r["label"] for r in scored),
        **precision_recall_f([r["label"] for r in scored], [int(r["keep"]) for r in scored]),
        "filter_effect": {
            "/".join(cell.values()): cell_filter_effect(
                cell, records, test, test_qids, role_prices(summary, prices)
            )
            for cell, records, summary in cells
        },
        "study": study,
        "labelled_questions": len(qids),
        "splits": {s: sum(1 for v in splits.values() if v == s) for s in ("train", "validation", "test")},
    }
    pool = [
        {"qid": q, "dataset": questions[q].get("dataset"), "p": pool_scores.get(q, 1.0)} for q in pool_qids
    ]
    return rows, metrics, pool


def transfer_effect(
    searches: list[tuple[dict[str, str], list[dict[str, Any]]]],
    scores: dict[str, float],
    threshold: float,
    exclude: frozenset[str] | set[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Table 2: per victim, pooled over its cells, the search success rate on every searched question and
    on those the classifier keeps (p >= threshold). Success and searched as the classifier's labels count
    them (an original the victim already fails is neither); a question without a score is kept and counted
    (`unscored`), never dropped. Questions in `exclude` (those the classifier trained on, with
    `cdv.classifier.table2.questions: unseen`) are left out and counted (`excluded`)."""
    by_victim: dict[str, dict[str, int]] = {}
    for cell, records in searches:
        total = by_victim.setdefault(
            cell["victim"],
            {"searched": 0, "successes": 0, "kept": 0, "kept_successes": 0, "unscored": 0, "excluded": 0},
        )
        for qid, label in outcome_labels(records).items():
            if qid in exclude:
                total["excluded"] += 1
                continue
            keep = scores.get(qid, 1.0) >= threshold
            total["searched"] += 1
            total["successes"] += label
            total["kept"] += keep
            total["kept_successes"] += label * keep
            total["unscored"] += qid not in scores
    return [
        {
            "victim": victim,
            **t,
            "success_rate_without_filter": t["successes"] / t["searched"] if t["searched"] else None,
            "success_rate_with_filter": t["kept_successes"] / t["kept"] if t["kept"] else None,
        }
        for victim, t in sorted(by_victim.items())
    ]
