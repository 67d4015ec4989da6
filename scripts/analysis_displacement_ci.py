"""Table 6: mean |Δr| per dataset × model with a bootstrap CI over systems."""

from stressprobe.persona import analysis, system_tables
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    systems = analysis.read_frames(smk.input.systems, smk.params.order)
    boot = smk.params.bootstrap
    system_tables.write_displacement_ci(
        systems,
        boot["resamples"],
        boot["seed"],
        boot["level"],
        stem(smk.output.table),
        analysis.read_frames(smk.input.shift, smk.params.order),
    )


run_script(main, snakemake)  # noqa: F821
