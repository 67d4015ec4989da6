"""One figure of the CDV paper's experiments (png, pdf) from its table: Figures 2/6 (cdv_experiments) and
Figure 5 (cdv_classifier_study)."""

import pandas as pd

from stressprobe.cdv import paper_figures as pf
from stressprobe.plots import save_figure
from stressprobe.snakemake_io import run_script


def main(smk):
    table = pd.read_csv(smk.input.table)
    builders = {"cdv_experiments": pf.experiments_figure, "cdv_classifier_study": pf.classifier_study_figure}
    figure = builders[smk.wildcards.cdv_study_figure](table, smk.params.figure)
    save_figure(figure, smk.output.png, smk.output.pdf, dpi=smk.params.figure["dpi"])


run_script(main, snakemake)  # noqa: F821
