"""Figure 2: condition vs human nDCG@10 per run, one panel per (dataset, model)."""

from stressprobe.persona import analysis, figures
from stressprobe.snakemake_io import run_script


def main(smk):
    systems = analysis.read_frames(smk.input.systems, smk.params.order)
    figures.write_ndcg_scatter(systems, (smk.output.png, smk.output.pdf), smk.params.order, smk.params.figure)


run_script(main, snakemake)  # noqa: F821
