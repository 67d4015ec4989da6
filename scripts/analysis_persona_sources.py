"""PersonaHub vs USPersona per matched role, side by side."""

from stressprobe.persona import analysis, system_tables
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    kappa = analysis.read_frames(smk.input.kappa, smk.params.order)
    systems = analysis.read_frames(smk.input.systems, smk.params.order)
    system_tables.write_persona_sources(
        kappa,
        systems,
        smk.params.rbo_phi,
        stem(smk.output.table),
        analysis.read_frames(smk.input.shift, smk.params.order),
        smk.params.undefined_kappa,
    )


run_script(main, snakemake)  # noqa: F821
