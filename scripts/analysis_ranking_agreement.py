"""Table 4: Kendall's τ-b and RBO_ext of each condition's system ranking vs the human ranking."""

from stressprobe.persona import analysis
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    systems = analysis.read_frames(smk.input.systems, smk.params.order)
    analysis.write_ranking_agreement(systems, smk.params.rbo_phi, stem(smk.output.table))


run_script(main, snakemake)  # noqa: F821
