"""Per dataset: nDCG@10 of every run under every judging cell and the human qrels (a tidy TSV)."""

from stressprobe.persona import analysis
from stressprobe.snakemake_io import run_script


def main(smk):
    analysis.write_system_frame(
        smk.wildcards.dataset, smk.input.ndcg, smk.params.cells, smk.input.topics, smk.output[0]
    )


run_script(main, snakemake)  # noqa: F821
