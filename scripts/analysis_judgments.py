"""Per dataset: per-query κ and label shift counts of every judged cell (tidy TSVs for the tables)."""

from stressprobe.persona import analysis
from stressprobe.snakemake_io import run_script


def main(smk):
    analysis.write_judgment_frames(
        smk.wildcards.dataset,
        smk.input.labels,
        smk.params.cells,
        smk.input.human,
        smk.output.kappa,
        smk.output.shift,
        smk.params.unparsed,
        smk.params.kappa_weights,
    )


run_script(main, snakemake)  # noqa: F821
