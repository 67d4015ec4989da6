"""The CDV tree search of one (dataset, proxy, victim) cell."""

from stressprobe.cdv.jobs import SearchFiles, search_cell, search_settings
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    settings = search_settings(
        smk.params.search,
        smk.params.classifier_threshold,
        smk.params.seed,
        smk.params.victim_prefill,
        smk.params.eval_temperature,
        smk.params.value,
        smk.params.prompts,
    )
    files = SearchFiles(smk.output.search, smk.output.perturbed, smk.output.summary, smk.output.usage)
    search_cell(
        smk.input.questions,
        smk.params.models,
        smk.params.roles,
        cache_path(smk),
        settings,
        smk.wildcards.dataset,
        files,
    )


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
