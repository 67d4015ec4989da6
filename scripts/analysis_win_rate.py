"""Table 3: win rate W% and mean κ shift with sign / Wilcoxon tests, Holm-corrected."""

from stressprobe.persona import analysis, judgment_tables
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    kappa = analysis.read_frames(smk.input.kappa, smk.params.order)
    judgment_tables.write_win_rate_tables(
        kappa, smk.params.alpha, stem(smk.output.table), stem(smk.output.detail), smk.params.undefined_kappa
    )


run_script(main, snakemake)  # noqa: F821
