"""One CDV table (csv, md, tex), chosen by the output's name (stressprobe.cdv.study_tables)."""

from stressprobe.cdv import study_tables
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem, write_table


def main(smk):
    inputs = dict(smk.input.items())
    table = study_tables.build(smk.wildcards.cdv_table, inputs, smk.params.settings)
    write_table(table, stem(smk.output.table), decimals={})


run_script(main, snakemake)  # noqa: F821
