"""Evaluate one vLLM model on every search cell of a dataset, loading it once (rule cdv_eval_vllm): per
cell, the originals, perturbed questions and baselines, and with mitigation the originals and perturbed
questions under the focus instruction; the same files as cdv_eval and cdv_mitigation write per cell."""

from stressprobe.cdv.jobs import EvalSettings, evaluate_group, group_cells
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    count = range(len(smk.params.cells))
    cells = group_cells(
        smk.params.cells,
        questions=[smk.input[f"questions_{i}"] for i in count],
        perturbed=[smk.input[f"perturbed_{i}"] for i in count],
        baselines=[smk.input.get(f"baselines_{i}", "") for i in count],
        records=smk.output.records,
        usage=smk.output.usage,
        mitigation=smk.output.mitigation,
        mitigation_usage=smk.output.mitigation_usage,
    )
    p = smk.params
    settings = EvalSettings.of(**p.answering, prompts=p.prompts)
    evaluate_group(smk.params.models, smk.wildcards.model, cache_path(smk), cells, settings)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
