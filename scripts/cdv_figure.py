"""One CDV figure (png, pdf), chosen by the output's name."""

from pathlib import Path

from stressprobe.cdv import report, search_report
from stressprobe.errors import StressprobeError
from stressprobe.plots import save_figure
from stressprobe.snakemake_io import run_script


def main(smk):
    name = smk.wildcards.cdv_figure
    builders = {
        "cdv_matrix": lambda: report.matrix_figure(smk.input.evals, smk.params.figure),
        "cdv_distribution": lambda: report.distribution_figure(smk.input.searches, smk.params.figure),
        "cdv_agreement": lambda: search_report.agreement_figure(smk.input.searches, smk.params.figure),
        "cdv_depth": lambda: search_report.depth_figure(smk.input.searches, smk.params.figure),
    }
    if name not in builders:
        raise StressprobeError(
            f"{Path(smk.output.png).name}: unknown CDV figure; known: {', '.join(builders)}"
        )
    save_figure(builders[name](), smk.output.png, smk.output.pdf, dpi=smk.params.figure["dpi"])


run_script(main, snakemake)  # noqa: F821
