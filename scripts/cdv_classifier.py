"""Perturbability classifier C(Q) on every cell's search outcomes: held-out precision/recall/F0.5 and the
search's success rate and cost with vs without the filter."""

import json
from pathlib import Path

import numpy as np

from stressprobe.cdv import cell_of
from stressprobe.cdv.classifier import (
    cell_filter_effect,
    fit_logit,
    labelled_rows,
    precision_recall_f,
    predict_logit,
    prompt_probabilities,
    role_prices,
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
    cells = []  # (cell, search records, search summary): each file read once
    for search_path, summary_path in zip(smk.input.searches, smk.input.summaries, strict=True):
        summary = json.loads(Path(summary_path).read_text(encoding="utf-8"))
        cells.append((cell_of(search_path, 1), read_jsonl(search_path), summary))
    rows = [row for cell, records, _ in cells for row in labelled_rows(cell, records)]  # one per (cell, qid)
    qids = sorted({r["qid"] for r in rows})
    train_qids, test_qids = (set(part) for part in split_keys(qids, settings["test_fraction"], seed))
    if settings["kind"] == "prompt":
        by_victim = {}
        for row in rows:
            by_victim.setdefault(settings["model"] or row["victim"], set()).add(row["qid"])
        probabilities = {}
        for model, model_qids in sorted(by_victim.items()):
            with role_clients(smk.params.models, {"classifier": model}, cache_path(smk)) as clients:
                found = prompt_probabilities(
                    clients["classifier"], [questions[q] for q in sorted(model_qids)], seed
                )
            probabilities.update({(model, q): p for q, p in found.items()})
        for row in rows:
            row["p"] = probabilities[(settings["model"] or row["victim"], row["qid"])]
    else:
        embedder = load_embedder(smk.params.embedding["model"], smk.params.embedding["batch_size"])
        vectors = dict(zip(qids, embedder.embed([questions[q]["question"] for q in qids]), strict=True))
        train = [r for r in rows if r["qid"] in train_qids]
        model = fit_logit(np.array([vectors[r["qid"]] for r in train]), np.array([r["label"] for r in train]))
        for row, p in zip(
            rows, predict_logit(model, np.array([vectors[r["qid"]] for r in rows])), strict=True
        ):
            row["p"] = float(p)
    for row in rows:
        row["split"] = "test" if row["qid"] in test_qids else "train"
        row["keep"] = row["p"] >= settings["threshold"]
    test = [r for r in rows if r["split"] == "test"]
    metrics = precision_recall_f([r["label"] for r in test], [int(r["keep"]) for r in test])
    effects = {
        "/".join(cell.values()): cell_filter_effect(
            cell, records, test, test_qids, role_prices(summary, smk.params.prices)
        )
        for cell, records, summary in cells
    }
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
