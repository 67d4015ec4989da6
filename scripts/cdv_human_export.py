"""Appendix B's sheet: original/perturbed pairs per dataset with the two yes/no questions left blank."""

from pathlib import Path

from stressprobe.cdv.human_eval import sample_pairs, write_sheet
from stressprobe.io import read_jsonl
from stressprobe.snakemake_io import run_script


def main(smk):
    rows = []
    for perturbed, questions in zip(smk.input.perturbed, smk.input.questions, strict=True):
        dataset = Path(questions).stem
        rows += sample_pairs(
            dataset, read_jsonl(questions), read_jsonl(perturbed), smk.params.n, smk.params.seed
        )
    write_sheet(smk.output[0], rows)


run_script(main, snakemake)  # noqa: F821
