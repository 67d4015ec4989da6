"""Table 4: Kendall's τ-b and RBO_ext of each condition's system ranking vs the human ranking (long, and
in the paper's blocks)."""

from stressprobe.persona import analysis, paper_tables, system_tables
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    systems = analysis.read_frames(smk.input.systems, smk.params.order)
    shift = analysis.read_frames(smk.input.shift, smk.params.order)
    system_tables.write_ranking_agreement(systems, smk.params.rbo_phi, stem(smk.output.table), shift)
    paper_tables.write_ranking_blocks(
        systems, smk.params.rbo_phi, smk.params.order["condition"], stem(smk.output.paper)
    )


run_script(main, snakemake)  # noqa: F821
