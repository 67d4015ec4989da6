"""Table 5: rank and nDCG@10 displacement vs UMBRELA per dataset × condition."""

from stressprobe.persona import analysis, system_tables
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    system_tables.write_displacement_table(
        analysis.read_frames(smk.input.systems, smk.params.order),
        stem(smk.output.table),
        analysis.read_frames(smk.input.shift, smk.params.order),
    )


run_script(main, snakemake)  # noqa: F821
