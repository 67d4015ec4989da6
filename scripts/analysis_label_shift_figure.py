"""Label shift profile figure (pooled over models, one panel per dataset)."""

from stressprobe.persona import analysis, figures
from stressprobe.snakemake_io import run_script


def main(smk):
    shift = analysis.read_frames(smk.input.shift, smk.params.order)
    figures.write_label_shift_figure(
        shift, (smk.output.png, smk.output.pdf), smk.params.order, smk.params.figure
    )


run_script(main, snakemake)  # noqa: F821
