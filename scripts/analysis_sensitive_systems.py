"""Table 7: the most sensitive systems per dataset with their type from the run metadata, and the
representative systems in the paper's layout."""

from stressprobe.persona import analysis, paper_tables, system_tables
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    systems = analysis.read_frames(smk.input.systems, smk.params.order)
    run_types = analysis.read_run_types(smk.params.order["dataset"], smk.input.run_metadata)
    shift = analysis.read_frames(smk.input.shift, smk.params.order)
    system_tables.write_sensitive_systems(systems, run_types, smk.params.top_k, stem(smk.output.table), shift)
    paper_tables.write_representative_systems(
        systems,
        run_types,
        smk.params.representative,
        smk.params.top_k,
        stem(smk.output.paper),
        datasets=smk.params.order["dataset"],
    )


run_script(main, snakemake)  # noqa: F821
