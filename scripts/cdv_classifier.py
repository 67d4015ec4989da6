"""Perturbability classifier C(Q) on every cell's search outcomes: held-out precision/recall/F0.5 and the
search's success rate and cost with vs without the filter."""

from pathlib import Path

import numpy as np

from stressprobe.cdv.classifier import (
    filter_effect,
    fit_logit,
    outcome_labels,
    precision_recall_f,
    predict_logit,
    prompt_probabilities,
    split_keys,
)
from stressprobe.cdv.clients import role_clients
from stressprobe.embedding import load_embedder
from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    settings, seed = smk.params.classifier, smk.params.seed
    questions = {}
    for path in smk.input.questions:
        questions.update({q["qid"]: q for q in read_jsonl(path)})
    rows = []  # one per (cell, qid) with a label
    for path in smk.input.searches:
        cell = Path(path).parent
        records = read_jsonl(path)
        rows += [
            {
                "dataset": cell.parts[-3],
                "proxy": cell.parts[-2],
                "victim": cell.parts[-1],
                "qid": qid,
                "label": label,
            }
            for qid, label in outcome_labels(records).items()
        ]
    train_qids, test_qids = split_keys(sorted({r["qid"] for r in rows}), settings["test_fraction"], seed)
    if settings["kind"] == "prompt":
        by_victim = {}
        for row in rows:
            by_victim.setdefault(settings["model"] or row["victim"], set()).add(row["qid"])
        probabilities = {}
        for model, qids in sorted(by_victim.items()):
            with role_clients(smk.params.models, {"classifier": model}, cache_path(smk)) as clients:
                found = prompt_probabilities(
                    clients["classifier"], [questions[q] for q in sorted(qids)], seed
                )
            probabilities.update({(model, q): p for q, p in found.items()})
        for row in rows:
            row["p"] = probabilities[(settings["model"] or row["victim"], row["qid"])]
    else:
        embedder = load_embedder(smk.params.embedding["model"], smk.params.embedding["batch_size"])
        qids = sorted({r["qid"] for r in rows})
        vectors = dict(zip(qids, embedder.embed([questions[q]["question"] for q in qids]), strict=True))
        train = [r for r in rows if r["qid"] in set(train_qids)]
        model = fit_logit(np.array([vectors[r["qid"]] for r in train]), np.array([r["label"] for r in train]))
        for row, p in zip(
            rows, predict_logit(model, np.array([vectors[r["qid"]] for r in rows])), strict=True
        ):
            row["p"] = float(p)
    for row in rows:
        row["split"] = "test" if row["qid"] in set(test_qids) else "train"
        row["keep"] = row["p"] >= settings["threshold"]
    test = [r for r in rows if r["split"] == "test"]
    metrics = precision_recall_f([r["label"] for r in test], [int(r["keep"]) for r in test])
    effects = {}
    for path in smk.input.searches:
        cell = Path(path).parent
        keep = {
            r["qid"]
            for r in test
            if r["keep"] and r["dataset"] == cell.parts[-3] and r["victim"] == cell.parts[-1]
        }
        test_records = [r for r in read_jsonl(path) if r["qid"] in set(test_qids)]
        prices = {
            "proxy": smk.params.prices.get(cell.parts[-2], {}),
            "victim": smk.params.prices.get(cell.parts[-1], {}),
        }
        prices["semantic"] = prices["victim"]
        effects["/".join(cell.parts[-3:])] = filter_effect(test_records, keep, prices)
    write_jsonl(smk.output.predictions, rows)
    write_json(
        smk.output.metrics,
        {
            "kind": settings["kind"],
            "threshold": settings["threshold"],
            "n_train": len(rows) - len(test),
            "n_test": len(test),
            "positives_test": sum(r["label"] for r in test),
            **metrics,
            "filter_effect": effects,
        },
    )


run_script(main, snakemake)  # noqa: F821
