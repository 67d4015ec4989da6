"""Synthetic judging-stage files in the contract formats, for the analysis tests and benchmark.

Human grades per pair; each judge condition copies them with seeded noise (a condition-specific bias
and spread) and a share of unparsed pairs; per-query nDCG@10 per run follows a run quality plus noise,
shifted per condition. Files are written exactly where the judging stage writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from stressprobe.io import atomic_write, write_jsonl
from stressprobe.persona.evaluation import format_ndcg_table
from stressprobe.persona.judging import CONDITIONS, HUMAN


@dataclass
class DatasetSpec:
    name: str
    queries: int
    runs: int
    pairs_per_query: int


@dataclass
class StudySpec:
    datasets: list[DatasetSpec]
    models: list[str]
    conditions: list[str] = field(default_factory=lambda: list(CONDITIONS))
    unparsed_share: float = 0.02
    seed: int = 0


def write_study_files(root: Path, spec: StudySpec) -> dict:
    """Write every input of the analysis under `root`; returns the config-like `order`."""
    rng = np.random.default_rng(spec.seed)
    for ds in spec.datasets:
        data = root / "results" / "data" / ds.name
        qids = [f"{ds.name}-q{i}" for i in range(ds.queries)]
        atomic_write(data / "topics.tsv", "".join(f"{q}\tquery text {q}\n" for q in qids))
        human = {
            (q, f"d{j}"): int(rng.choice(4, p=[0.45, 0.25, 0.18, 0.12]))
            for q in qids
            for j in range(ds.pairs_per_query)
        }
        atomic_write(data / "qrels.txt", "".join(f"{q} 0 {d} {g}\n" for (q, d), g in human.items()))
        runs = [f"run{r:02d}" for r in range(ds.runs)]
        types = ["dense", "sparse", "rerank"]
        metadata = "".join(
            f"{r}\t{types[i % 3]}\n" for i, r in enumerate(runs) if i % 4
        )  # some without a type
        atomic_write(data / "run_metadata.tsv", "run\ttype\n" + metadata)
        quality = np.sort(rng.uniform(0.3, 0.8, ds.runs))[::-1]
        base = np.clip(quality[:, None] + rng.normal(0, 0.15, (ds.runs, ds.queries)), 0, 1)
        judging = root / "results" / "judging" / ds.name
        _write_ndcg(judging / "ndcg" / HUMAN / HUMAN / f"{HUMAN}.tsv", runs, qids, base)
        grades = np.array(list(human.values()))
        for model in spec.models:
            for c, condition in enumerate(spec.conditions):
                bias, spread = (0.0, 0.5) if c == 0 else (rng.uniform(-0.6, 0.3), rng.uniform(0.4, 1.0))
                labels = np.clip(np.rint(grades + bias + rng.normal(0, spread, len(grades))), 0, 3).astype(
                    int
                )
                unparsed = rng.random(len(grades)) < spec.unparsed_share
                records = [
                    {
                        "qid": q,
                        "docid": d,
                        "label": None if bad else int(label),
                        "raw": "##final score: x",
                        "status": "unparsed" if bad else "ok",
                        "probs": None,
                        "expected": None,
                        "persona": None,
                    }
                    for (q, d), label, bad in zip(human, labels, unparsed, strict=True)
                ]
                write_jsonl(judging / "judgments" / model / f"{condition}.jsonl", records)
                shifted = np.clip(base + rng.normal(bias * 0.05, 0.03 * spread, base.shape), 0, 1)
                _write_ndcg(judging / "ndcg" / model / f"{condition}.tsv", runs, qids, shifted)
    return {
        "dataset": [d.name for d in spec.datasets],
        "model": list(spec.models),
        "condition": list(spec.conditions),
    }


def _write_ndcg(path: Path, runs: list[str], qids: list[str], scores: np.ndarray) -> None:
    rows = []
    for r, run in enumerate(runs):
        rows += [{"run": run, "qid": q, "ndcg_cut_10": float(scores[r, i])} for i, q in enumerate(qids)]
        rows.append({"run": run, "qid": "all", "ndcg_cut_10": float(scores[r].mean())})
    atomic_write(path, format_ndcg_table(rows))


def study_paths(root: Path, order: dict) -> dict:
    """Per dataset, the paths and cells the analysis rules pass (labels, nDCG, human, topics, metadata)."""
    out = {}
    for ds in order["dataset"]:
        judging = root / "results" / "judging" / ds
        cells = [(m, c) for m in order["model"] for c in order["condition"]]
        out[ds] = {
            "label_cells": cells,
            "labels": [judging / "judgments" / m / f"{c}.jsonl" for m, c in cells],
            "ndcg_cells": [*cells, (HUMAN, f"{HUMAN}/{HUMAN}")],
            "ndcg": [judging / "ndcg" / m / f"{c}.tsv" for m, c in [*cells, (HUMAN, f"{HUMAN}/{HUMAN}")]],
            "human": root / "results" / "data" / ds / "qrels.txt",
            "topics": root / "results" / "data" / ds / "topics.tsv",
            "run_metadata": root / "results" / "data" / ds / "run_metadata.tsv",
            "kappa": root / "results" / "analysis" / ds / "kappa.tsv",
            "shift": root / "results" / "analysis" / ds / "label_shift.tsv",
            "systems": root / "results" / "analysis" / ds / "systems.tsv",
        }
    return out
