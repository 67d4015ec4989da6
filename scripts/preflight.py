"""The preflight (`snakemake -f preflight`): its findings written, and one line per problem if any."""

from stressprobe.io import atomic_write
from stressprobe.preflight import preflight_csv, preflight_markdown, report_and_stop, run_preflight
from stressprobe.snakemake_io import log, run_script


def main(smk):
    findings = run_preflight(
        smk.params.names,
        smk.params.models,
        smk.params.run_days,
        trained=smk.params.trained,
        pools=smk.params.pools,
        unpinned=smk.params.unpinned,
    )
    for finding in findings:
        log.info("%s %s: %s", finding.level, finding.model, finding.message)
    report_and_stop(findings)
    atomic_write(smk.output.csv, preflight_csv(findings))
    atomic_write(smk.output.md, preflight_markdown(findings))


run_script(main, snakemake)  # noqa: F821
