"""Evaluate one model on a CDV cell's originals, perturbed questions and baselines (or, with mitigation, the
originals and perturbed questions under the focus instruction)."""

from stressprobe.cdv.clients import role_clients, write_merged_usage
from stressprobe.cdv.evaluate import eval_items, evaluate
from stressprobe.cdv.jobs import job_prompts
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    questions = read_jsonl(smk.input.questions)
    perturbed = read_jsonl(smk.input.perturbed)
    # Only cdv_eval has a baselines input (when baselines are enabled); cdv_mitigation never does.
    baselines = read_jsonl(smk.input.baselines) if hasattr(smk.input, "baselines") else []
    items = eval_items(questions, perturbed, baselines)
    model = smk.wildcards.model
    with role_clients(smk.params.models, {"eval": model}, cache_path(smk)) as clients:
        records = evaluate(
            clients["eval"],
            items,
            smk.params.max_tokens,
            smk.params.seed,
            smk.params.mitigation,
            smk.params.prefill,
            smk.params.temperature,
            job_prompts(smk.params.prompts),
        )
        write_merged_usage(clients, smk.output.usage)
    write_jsonl(smk.output.records, records)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
