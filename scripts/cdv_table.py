"""One CDV table (csv, md, tex), chosen by the output's name."""

from pathlib import Path

from stressprobe.cdv import report, search_report
from stressprobe.errors import StressprobeError
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem, write_table


def main(smk):
    name = smk.wildcards.cdv_table
    builders = {
        "cdv_search": lambda: report.search_table(smk.input.summaries),
        # Table 1 beside the same numbers with the originals the victim already fails (depth-0 members of L).
        "cdv_accuracy": lambda: report.accuracy_table(smk.input.evals).merge(
            search_report.accuracy_with_originals(smk.input.evals, smk.input.searches),
            on=["dataset", "proxy", "victim", "model"],
            how="left",
        ),
        "cdv_baselines": lambda: report.baselines_table(smk.input.evals),
        "cdv_mitigation": lambda: report.mitigation_table(smk.input.evals, smk.input.mitigation),
        "cdv_classifier": lambda: report.classifier_table(smk.input.classifier),
        "cdv_value_ablation": lambda: search_report.value_ablation_table(smk.input.variant_summaries),
    }
    if name not in builders:
        raise StressprobeError(
            f"{Path(smk.output.table).name}: unknown CDV table; known: {', '.join(builders)}"
        )
    write_table(builders[name](), stem(smk.output.table), decimals={})


run_script(main, snakemake)  # noqa: F821
