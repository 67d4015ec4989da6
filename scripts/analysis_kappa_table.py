"""Mean κ vs UMBRELA and vs human labels per dataset × model × condition."""

from stressprobe.persona import analysis, judgment_tables
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    judgment_tables.write_kappa_table(
        analysis.read_frames(smk.input.kappa, smk.params.order), stem(smk.output.table)
    )


run_script(main, snakemake)  # noqa: F821
