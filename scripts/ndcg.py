"""nDCG@10 of every run of a dataset under one qrels (an LLM cell, an external judge, or the human qrels)."""

from stressprobe.io import atomic_write
from stressprobe.persona.evaluation import format_ndcg_table, ndcg_table_from_files
from stressprobe.snakemake_io import run_script


def main(smk):
    rows = ndcg_table_from_files(smk.input.qrels, smk.input.runs, smk.input.topics)
    atomic_write(smk.output[0], format_ndcg_table(rows))


run_script(main, snakemake)  # noqa: F821
