"""config/reproduce-dl20.yaml: external judgments of the real DL20 runs with no model at all.

The external qrels are the test's own (the NIST qrels with seeded label noise); the τ-b, RBO and rank
displacement the workflow reports are checked against an independent computation here (pytrec_eval nDCG@10,
scipy's Kendall τ-b and rank data, and an RBO_ext written out in this file).
"""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

import pytest
import pytrec_eval
import yaml
from scipy import stats

from tests.support.helpers import ROOT, make_workdir, run_snakemake, shared_data
from tests.support.paper_dag import job_counts

CONFIG = ROOT / "config" / "reproduce-dl20.yaml"
GRADES = (0, 1, 2, 3)
NOISE = {"baseline/umbrela": 0.15, "fixed/gap": 0.35}  # share of labels replaced by another grade


def noisy_qrels(source: Path, dest: Path, share: float, seed: int) -> None:
    """The qrels with a seeded `share` of grades replaced by a different grade."""
    rng = random.Random(seed)
    lines = []
    for line in source.read_text().splitlines():
        qid, it, docid, grade = line.split()
        if rng.random() < share:
            grade = str(rng.choice([g for g in GRADES if g != int(grade)]))
        lines.append(f"{qid} {it} {docid} {grade}\n")
    dest.write_text("".join(lines))


def system_ndcg(qrels_path: Path, runs: Path, qids: list[str]) -> dict[str, float]:
    """Mean nDCG@10 per run over `qids` (a query a run does not answer scores 0), straight from pytrec_eval."""
    with qrels_path.open() as handle:
        qrels = {q: docs for q, docs in pytrec_eval.parse_qrel(handle).items() if q in qids}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"})
    scores = {}
    for path in sorted(runs.glob("*.run")):
        with path.open() as handle:
            per_query = evaluator.evaluate(pytrec_eval.parse_run(handle))
        scores[path.stem] = sum(per_query.get(q, {}).get("ndcg_cut_10", 0.0) for q in qids) / len(qids)
    return scores


def ranking(scores: dict[str, float]) -> list[str]:
    return sorted(scores, key=lambda run: (-round(scores[run], 12), run))


def rbo_ext_same_length(first: list[str], second: list[str], phi: float) -> float:
    """Webber et al.'s RBO_ext for two rankings of the same k items: (1-φ)/φ Σ_d X_d/d φ^d + X_k/k φ^k."""
    k = len(first)
    total = 0.0
    for d in range(1, k + 1):
        overlap = len(set(first[:d]) & set(second[:d]))
        total += overlap / d * phi**d
    return (1 - phi) / phi * total + phi**k  # X_k = k: the same items


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    dl20 = shared_data("dl20")
    tmp = tmp_path_factory.mktemp("reproduce")
    workdir = make_workdir(tmp / "work")
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    external = {}
    for i, (condition, share) in enumerate(NOISE.items()):
        path = tmp / f"noisy-{i}.qrels"
        noisy_qrels(dl20 / "qrels.txt", path, share, seed=100 + i)
        external[condition] = str(path)
    config["judging"]["datasets"]["dl20"] = {
        "topics": str(dl20 / "topics.tsv"),
        "qrels": str(dl20 / "qrels.txt"),
        "passages": str(dl20 / "passages.tsv"),
        "runs": str(dl20 / "runs"),
        "summarize": False,
    }
    config["judging"]["external"] = {"umbrela": {"dl20": external}}
    configfile = tmp / "reproduce.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))

    plan = run_snakemake(workdir, "-n", "--quiet", "rules", configfile=configfile)
    run_snakemake(workdir, configfile=configfile)
    return workdir, dl20, {c: Path(p) for c, p in external.items()}, plan.stdout + plan.stderr, config


@pytest.mark.slow
def test_no_model_job_is_planned(reproduced):
    _, _, _, plan, config = reproduced
    assert config["models"] == {} and config["judging"]["models"] == []
    jobs = job_counts(plan)
    for rule in ("summarize", "judge", "judge_qrels", "select_personas", "persona_pool", "query_domains"):
        assert rule not in jobs, f"{rule} is planned without a judge model"
    assert jobs["external_qrels"] == len(NOISE)
    assert jobs["ndcg"] == len(NOISE) + 1  # + the human qrels
    assert jobs["analysis_ranking_agreement"] == 1 and jobs["analysis_rank_displacement"] == 1


@pytest.mark.slow
def test_tau_and_rbo_match_an_independent_computation(reproduced):
    workdir, dl20, external, _, config = reproduced
    qids = [line.split("\t")[0] for line in (dl20 / "topics.tsv").read_text().splitlines() if line.strip()]
    human = system_ndcg(dl20 / "qrels.txt", dl20 / "runs", qids)
    rows = {
        row["condition"]: row
        for row in read_csv(workdir / "results" / "tables" / "table4_ranking_agreement.csv")
        if row["dataset"] == "dl20" and row["model"] == "umbrela"
    }
    assert set(rows) == set(NOISE)
    phi = config["analysis"]["rbo_phi"]
    for condition, path in external.items():
        scores = system_ndcg(path, dl20 / "runs", qids)
        runs = sorted(scores)
        tau = stats.kendalltau([scores[r] for r in runs], [human[r] for r in runs]).statistic
        rbo = rbo_ext_same_length(ranking(scores), ranking(human), phi)
        assert float(rows[condition]["τ-b"]) == pytest.approx(tau, abs=1e-5), condition
        assert float(rows[condition]["RBO"]) == pytest.approx(rbo, abs=1e-5), condition
        assert int(rows[condition]["systems"]) == len(runs) == 39
    # more label noise, a ranking further from the human one: the check is not vacuous
    assert float(rows["fixed/gap"]["τ-b"]) < float(rows["baseline/umbrela"]["τ-b"]) < 1


@pytest.mark.slow
def test_displacement_matches_an_independent_computation(reproduced):
    workdir, dl20, external, _, _ = reproduced
    qids = [line.split("\t")[0] for line in (dl20 / "topics.tsv").read_text().splitlines() if line.strip()]
    base = system_ndcg(external["baseline/umbrela"], dl20 / "runs", qids)
    gap = system_ndcg(external["fixed/gap"], dl20 / "runs", qids)
    runs = sorted(base)
    ranks_base = stats.rankdata([-round(base[r], 12) for r in runs], method="average")
    ranks_gap = stats.rankdata([-round(gap[r], 12) for r in runs], method="average")
    shifts = [abs(g - b) for g, b in zip(ranks_gap, ranks_base, strict=True)]
    (row,) = [
        r
        for r in read_csv(workdir / "results" / "tables" / "table5_rank_displacement.csv")
        if r["dataset"] == "dl20" and r["condition"] == "fixed/gap"
    ]
    assert float(row["mean |Δr|"]) == pytest.approx(sum(shifts) / len(shifts), abs=1e-5)
    assert float(row["max |Δr|"]) == pytest.approx(max(shifts), abs=1e-5)
    mean_delta = sum(gap[r] - base[r] for r in runs) / len(runs)
    assert float(row["mean ΔnDCG@10"]) == pytest.approx(mean_delta, abs=1e-5)
    assert sum(shifts) > 0 and not math.isnan(float(row["mean |Δr|"]))
