"""Shares the paper's text states about the searches that label the classifier (the scale-up searches):
Appendix A.2's depth and length shares of successful perturbations (Figure 7's text) and section 4.3's
share of the search spent on hard-to-perturb questions, in the long form of cdv_vs_paper's run values.

Definitions (the paper gives none beyond its sentences). A.2: over the successes at depth >= 1 per dataset
(an original the victim already fails is no perturbation), the share at depth <= 3, at depth >= 5, with a
length ratio > 5 and <= 3. Section 4.3: a searched question (neither classifier-filtered nor failed before
the search, and with an answered original: stressprobe.scoring) with no success at depth >= 1 is hard to
perturb; the wasted share is its requests (every role, the root's `calls`) over the requests of all
searched questions, pooled over the datasets.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from stressprobe.cdv import cell_of
from stressprobe.io import read_jsonl
from stressprobe.scoring import is_unanswered

ALL = "all"
DISTRIBUTION, WASTED = "distribution", "classifier_study"


def _shares(successes: list[dict[str, Any]]) -> dict[str, float]:
    n = len(successes)
    tests = {
        "share_depth_le_3": lambda r: r["depth"] <= 3,
        "share_depth_ge_5": lambda r: r["depth"] >= 5,
        "share_length_ratio_gt_5": lambda r: r["length_ratio"] > 5,
        "share_length_ratio_le_3": lambda r: r["length_ratio"] <= 3,
    }
    return {column: sum(map(test, successes)) / n for column, test in tests.items()}


def search_share_rows(search_paths: list[str]) -> list[dict[str, Any]]:
    """A.2's four shares per dataset (none for a dataset without a success) and section 4.3's wasted share
    (none without searched requests), as run rows (experiment, dataset, model, column, value)."""
    successes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    calls = {"all": 0, "wasted": 0}
    for path in search_paths:
        dataset = cell_of(path, 1)["dataset"]
        records = read_jsonl(path)
        perturbed = {r["qid"] for r in records if r["status"] == "success" and r["depth"] >= 1}
        successes[dataset] += [r for r in records if r["status"] == "success" and r["depth"] >= 1]
        for root in (r for r in records if r["depth"] == 0):
            # Never searched: filtered, already failed, or without an answer (stressprobe.scoring).
            if root["flag"] in ("classifier_filtered", "victim_fails_original") or is_unanswered(root):
                continue
            calls["all"] += root["calls"] or 0
            calls["wasted"] += (root["calls"] or 0) * (root["qid"] not in perturbed)
    rows = [
        {"experiment": DISTRIBUTION, "dataset": dataset, "model": ALL, "column": column, "value": value}
        for dataset, found in sorted(successes.items())
        if found
        for column, value in _shares(found).items()
    ]
    if calls["all"]:
        share = calls["wasted"] / calls["all"]
        rows.append(
            {"experiment": WASTED, "dataset": ALL, "model": ALL, "column": "wasted_share", "value": share}
        )
    return rows
