"""Perturbability classifier C(Q) on the label cells' search outcomes: the configured classifier's held-out
precision/recall/F0.5 and filter effect, the classifier study (Table 7), and the cost experiment's pool's scores."""

import json
from pathlib import Path

from stressprobe.cdv import cell_of
from stressprobe.cdv.classifier import prompt_answers, run_classifier
from stressprobe.cdv.clients import role_clients
from stressprobe.embedding import load_embedder
from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    questions = {}
    for path in smk.input.questions:
        questions.update({q["qid"]: {**q, "dataset": Path(path).stem} for q in read_jsonl(path)})
    cells = [
        (cell_of(search, 1), read_jsonl(search), json.loads(Path(summary).read_text(encoding="utf-8")))
        for search, summary in zip(smk.input.searches, smk.input.summaries, strict=True)
    ]

    def embed(texts):
        embedding = smk.params.embedding
        return (
            load_embedder(embedding["model"], embedding["batch_size"], sha256=embedding.get("sha256")).embed(
                texts
            )
            if texts
            else []
        )

    def ask(model, asked):
        with role_clients(smk.params.models, {"classifier": model}, cache_path(smk)) as clients:
            return prompt_answers(clients["classifier"], asked, smk.params.seed)

    rows, metrics, pool = run_classifier(
        cells, questions, smk.params.classifier, smk.params.seed, embed, ask, smk.params.prices
    )
    write_jsonl(smk.output.predictions, rows)
    write_jsonl(smk.output.pool, pool)
    write_json(smk.output.metrics, metrics)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
