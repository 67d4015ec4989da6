"""System–condition pairs whose rank displacement has the same sign under every model."""

from stressprobe.persona import analysis, system_tables
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    systems = analysis.read_frames(smk.input.systems, smk.params.order)
    shift = analysis.read_frames(smk.input.shift, smk.params.order)
    system_tables.write_direction_consistency(systems, stem(smk.output.table), stem(smk.output.counts), shift)


run_script(main, snakemake)  # noqa: F821
