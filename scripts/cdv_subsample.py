"""A nested seeded subsample of one dataset's CDV questions (the sample size of some search cells)."""

from stressprobe.cdv.experiments import nested_sample
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.snakemake_io import run_script


def main(smk):
    questions = read_jsonl(smk.input[0])
    write_jsonl(smk.output[0], nested_sample(questions, int(smk.wildcards.n), smk.params.seed))


run_script(main, snakemake)  # noqa: F821
