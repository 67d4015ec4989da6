"""Elaborated and Prompt-only baseline questions of one CDV cell."""

from stressprobe.cdv.baselines import baseline_questions
from stressprobe.cdv.clients import role_clients, write_merged_usage
from stressprobe.cdv.jobs import job_prompts
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    questions = read_jsonl(smk.input.questions)
    with role_clients(smk.params.models, {"baseline": smk.params.model}, cache_path(smk)) as clients:
        records = baseline_questions(
            clients["baseline"],
            questions,
            smk.params.settings["max_tokens"],
            smk.params.temperature,
            smk.params.seed,
            smk.params.settings["prompt_only"],
            job_prompts(smk.params.prompts),
        )
        write_merged_usage(clients, smk.output.usage)
    write_jsonl(smk.output.baselines, records)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
