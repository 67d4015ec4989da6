"""The vs_paper scorecard: the run's Figure 1 and Table 3-7 values beside the paper's published ones."""

import pandas as pd

from stressprobe.persona import analysis, vs_paper
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    kappa = analysis.read_frames(smk.input.kappa, smk.params.order)
    systems = analysis.read_frames(smk.input.systems, smk.params.order)
    vs_paper.write_vs_paper(
        smk.input.values,
        kappa,
        systems,
        smk.params.rbo_phi,
        smk.params.bootstrap,
        smk.params.names,
        stem(smk.output.table),
        stem(smk.output.summary),
        smk.params.undefined_kappa,
        # The Table 2 check's table, its dataset and query, where the config turns it on.
        (pd.read_csv(table2, keep_default_na=False), check["dataset"], check["qid"])
        if (table2 := getattr(smk.input, "table2", None)) and (check := smk.params.table2_check)
        else None,
    )


run_script(main, snakemake)  # noqa: F821
