"""Ask one model the original questions of every cell of a CDV dataset once (rule cdv_eval_originals; with
mitigation under the focus instruction): the records each cell's evaluation picks its own from."""

from stressprobe.cdv.jobs import EvalSettings, evaluate_originals
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    p = smk.params
    settings = EvalSettings.of(**p.answering, prompts=p.prompts)
    outputs = (smk.output.records, smk.output.usage)
    evaluate_originals(
        p.models,
        smk.wildcards.model,
        cache_path(smk),
        list(smk.input.questions),
        settings,
        p.mitigation,
        outputs,
    )


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
