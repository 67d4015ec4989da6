"""DPO preference pairs (TRL DPOTrainer JSONL) from every cell's perturbed questions and evaluations."""

from stressprobe.cdv import cell_of
from stressprobe.cdv.dpo import preference_pairs, split_pairs
from stressprobe.cdv.search import wrong_answer
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.snakemake_io import run_script


def main(smk):
    pairs = []
    evals_by_cell = {}
    for path in smk.input.evals:
        evals_by_cell.setdefault(tuple(cell_of(path, 2).values()), []).extend(read_jsonl(path))
    for perturbed_path, search_path in zip(smk.input.perturbed, smk.input.searches, strict=True):
        cell = cell_of(perturbed_path, 1)
        # A success's wrong answer: the audit's greedy one when it was wrong, else a sampled one.
        greedy = {r["node_id"]: wrong_answer(r) for r in read_jsonl(search_path) if r["status"] == "success"}
        pairs += preference_pairs(
            cell["dataset"], read_jsonl(perturbed_path), evals_by_cell.get(tuple(cell.values()), []), greedy
        )
    train, test = split_pairs(pairs, smk.params.test_fraction, smk.params.seed)
    write_jsonl(smk.output.train, train)
    write_jsonl(smk.output.test, test)


run_script(main, snakemake)  # noqa: F821
