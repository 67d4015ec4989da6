"""Figure 1: heatmap of mean κ vs UMBRELA."""

from stressprobe.persona import analysis, figures
from stressprobe.snakemake_io import run_script


def main(smk):
    kappa = analysis.read_frames(smk.input.kappa, smk.params.order)
    figures.write_kappa_heatmap(kappa, (smk.output.png, smk.output.pdf), smk.params.order, smk.params.figure)


run_script(main, snakemake)  # noqa: F821
