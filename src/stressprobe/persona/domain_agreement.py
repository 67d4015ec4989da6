"""How well the automatic query→domain assignment agrees with a user's mapping file.

When a dataset comes with a `domains` file, that mapping is the one the study uses; the automatic assignment
(the most similar taxonomy domain, as used without a file) is computed beside it, and the two are compared
over the dataset's queries: raw agreement, Cohen's κ (unweighted: domains are nominal) and the confusion.
The paper reports κ = 0.86 between its two human annotators, which gives a scale for the automatic one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from statsmodels.stats.inter_rater import cohens_kappa

from stressprobe import tables
from stressprobe.io import atomic_write
from stressprobe.persona import pools as personas


def nominal_kappa(first: Sequence[str], second: Sequence[str], categories: Sequence[str]) -> float:
    """Cohen's κ (unweighted) of two aligned category vectors; NaN when undefined.

    κ is undefined when there are no items, or when both raters put every item in one and the same
    category (expected agreement 1: perfect agreement that chance explains just as well).
    """
    if len(first) == 0:
        return math.nan
    index = {c: i for i, c in enumerate(categories)}
    table = np.zeros((len(categories), len(categories)))
    np.add.at(table, ([index[a] for a in first], [index[b] for b in second]), 1)
    expected = (table.sum(axis=1) @ table.sum(axis=0)) / table.sum() ** 2
    if math.isclose(expected, 1.0):
        return math.nan
    return float(cohens_kappa(table, return_results=False))


def domain_agreement(
    mapping: Mapping[str, str], automatic: Mapping[str, str], domains: Sequence[str]
) -> dict:
    """Agreement of the file's mapping with the automatic one over the file's queries (same qids).

    Returns queries, agreeing, agreement (share), kappa, the confusion `{file domain: {automatic domain:
    queries}}` (non-zero cells only) and the disagreeing queries.
    """
    qids = list(mapping)
    first = [mapping[q] for q in qids]
    second = [automatic[q] for q in qids]
    categories = list(dict.fromkeys([*domains, *first, *second]))
    confusion: dict[str, dict[str, int]] = {}
    for a, b in zip(first, second, strict=True):
        confusion.setdefault(a, {}).setdefault(b, 0)
        confusion[a][b] += 1
    agreeing = sum(a == b for a, b in zip(first, second, strict=True))
    kappa = nominal_kappa(first, second, categories)
    return {
        "queries": len(qids),
        "agreeing": agreeing,
        "agreement": agreeing / len(qids) if qids else None,
        "kappa": None if math.isnan(kappa) else kappa,
        "confusion": {a: dict(sorted(row.items())) for a, row in sorted(confusion.items())},
        "disagreements": [
            {"qid": q, "file": a, "automatic": b}
            for q, a, b in zip(qids, first, second, strict=True)
            if a != b
        ],
    }


def dataset_agreement(
    topics: Mapping[str, str],
    mapping_path: str | Path,
    taxonomy_path: str | Path,
    embed: Callable[[list[str]], np.ndarray],
) -> dict:
    """Read a dataset's mapping file (checked as the persona stage checks it), assign domains
    automatically to the same queries, and compare the two."""
    taxonomy = personas.read_taxonomy(taxonomy_path)
    names = [d.name for d in taxonomy]
    mapping = personas.read_domain_mapping(mapping_path, topics, names)
    qids = list(mapping)
    assigned = personas.assign_domains(
        qids, embed([topics[q] for q in qids]), taxonomy, embed([d.text for d in taxonomy])
    )
    return domain_agreement(mapping, {q: name for q, (name, _) in assigned.items()}, names)


def agreement_tables(results: Mapping[str, Mapping]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary, confusion): one row per dataset; one row per dataset × (file domain, automatic domain)."""
    summary = pd.DataFrame(
        [
            {
                "dataset": dataset,
                "queries": r["queries"],
                "agreeing": r["agreeing"],
                "agreement %": 100 * r["agreement"] if r["agreement"] is not None else math.nan,
                "κ": r["kappa"] if r["kappa"] is not None else math.nan,
            }
            for dataset, r in results.items()
        ],
        columns=["dataset", "queries", "agreeing", "agreement %", "κ"],
    )
    confusion = pd.DataFrame(
        [
            {"dataset": dataset, "file domain": a, "automatic domain": b, "queries": n}
            for dataset, r in results.items()
            for a, row in r["confusion"].items()
            for b, n in row.items()
        ],
        columns=["dataset", "file domain", "automatic domain", "queries"],
    )
    return summary, confusion


def write_agreement(
    results: Mapping[str, Mapping], json_paths: Sequence[str | Path], summary_stem: str, confusion_stem: str
) -> None:
    """Per dataset a JSON file (same order as `results`), and the summary and confusion tables."""
    for (_, result), path in zip(results.items(), json_paths, strict=True):
        atomic_write(path, json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    summary, confusion = agreement_tables(results)
    tables.write_table(summary, summary_stem, {"agreement %": 1, "κ": 3})
    tables.write_table(confusion, confusion_stem)
