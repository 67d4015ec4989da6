"""DPO preference pairs (TRL DPOTrainer JSONL) from the pair cells' perturbed questions and evaluations,
split by original question, and the held-out perturbed questions the trained model is evaluated on."""

from pathlib import Path

from stressprobe.cdv import cell_of
from stressprobe.cdv.dpo import (
    heldout_questions,
    preference_pairs,
    release_pairs,
    split_pair_groups,
    trl_rows,
)
from stressprobe.cdv.search import wrong_answer
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.snakemake_io import run_script


def main(smk):
    pairs, perturbed_by_dataset = [], {}
    evals_by_cell = {}  # cell -> one record list per evaluator, in the order of cdv.dpo.pair_evaluators
    for path in smk.input.evals:
        evals_by_cell.setdefault(tuple(cell_of(path, 2).values()), []).append(read_jsonl(path))
    for perturbed_path, search_path in zip(smk.input.perturbed, smk.input.searches, strict=True):
        cell = cell_of(perturbed_path, 1)
        perturbed = read_jsonl(perturbed_path)
        perturbed_by_dataset.setdefault(cell["dataset"], []).extend(perturbed)
        evals = evals_by_cell.get(tuple(cell.values()), [])
        if smk.params.pairs == "release":
            pairs += release_pairs(cell["dataset"], perturbed, evals, smk.params.answer_line)
            continue
        # A success's wrong answer: the audit's greedy one when it was wrong, else a sampled one.
        greedy = {r["node_id"]: wrong_answer(r) for r in read_jsonl(search_path) if r["status"] == "success"}
        flat = [record for records in evals for record in records]
        pairs += preference_pairs(cell["dataset"], perturbed, flat, greedy, smk.params.answer_line)
    parts = split_pair_groups(
        pairs, smk.params.validation_fraction, smk.params.test_fraction, smk.params.seed
    )
    test_groups = {p["group"] for p in parts["test"]}
    # The release's test set is its test pairs' questions; the project's, every perturbed question of the
    # test groups.
    test_nodes = {p["node_id"] for p in parts["test"]} if smk.params.pairs == "release" else None
    originals = {Path(p).stem: {q["qid"]: q for q in read_jsonl(p)} for p in smk.input.questions}
    heldout = [
        q
        for dataset, perturbed in sorted(perturbed_by_dataset.items())
        for q in heldout_questions(dataset, perturbed, test_groups, originals.get(dataset), test_nodes)
    ]
    write_jsonl(smk.output.train, trl_rows(parts["train"]))
    write_jsonl(smk.output.validation, trl_rows(parts["validation"]))
    write_jsonl(smk.output.test, trl_rows(parts["test"]))
    write_jsonl(smk.output.heldout, heldout)


run_script(main, snakemake)  # noqa: F821
