"""DPO preference pairs (TRL DPOTrainer JSONL) from every cell's perturbed questions and evaluations."""

from pathlib import Path

from stressprobe.cdv.dpo import preference_pairs, split_pairs
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.snakemake_io import run_script


def main(smk):
    pairs = []
    evals_by_cell = {}
    for path in smk.input.evals:
        evals_by_cell.setdefault(str(Path(path).parent.parent), []).extend(read_jsonl(path))
    for perturbed_path, search_path in zip(smk.input.perturbed, smk.input.searches, strict=True):
        cell = Path(perturbed_path).parent
        greedy = {r["node_id"]: r["greedy_raw"] for r in read_jsonl(search_path) if r["status"] == "success"}
        dataset = cell.parts[-3]
        pairs += preference_pairs(
            dataset, read_jsonl(perturbed_path), evals_by_cell.get(str(cell), []), greedy
        )
    train, test = split_pairs(pairs, smk.params.test_fraction, smk.params.seed)
    write_jsonl(smk.output.train, train)
    write_jsonl(smk.output.test, test)


run_script(main, snakemake)  # noqa: F821
