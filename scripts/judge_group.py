"""Every judge cell of one dataset for one vLLM model, with the model loaded once (rule judge_vllm)."""

from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.llm import open_client
from stressprobe.persona.data import read_topics
from stressprobe.persona.judging import (
    cell_summary,
    condition_personas,
    condition_settings,
    is_retrieved,
    judge_cell,
    split_condition,
)
from stressprobe.persona.prompts import load_judge_template
from stressprobe.snakemake_io import cache_path, log, run_script


def main(smk):
    summaries = read_jsonl(smk.input.summaries)
    topics = read_topics(smk.input.topics)
    template = load_judge_template(smk.input.template).with_system(smk.params.system_message)
    outputs = zip(smk.output.judgments, smk.output.usage, smk.output.summary, strict=True)
    with open_client(smk.params.models, smk.wildcards.model, cache_path(smk)) as client:
        for condition, (judgments, usage, summary) in zip(smk.params.conditions, outputs, strict=True):
            source, role = split_condition(condition)
            path = smk.input.get(f"personas_{source}", "") if is_retrieved(source) else ""
            records = read_jsonl(path) if path else None
            text = smk.params.personas[condition]
            fixed = {role: text} if text is not None else {}
            personas = condition_personas(topics, source, role, fixed, records, path)
            settings = condition_settings(
                template,
                condition,
                smk.params.max_tokens,
                smk.params.logprobs,
                smk.params.prefill,
                smk.params.delivery,
                smk.params.reader,
            )
            client.reset_usage()  # each cell's sidecar counts its own calls
            cell = judge_cell(client, summaries, topics, personas, settings)
            client.write_usage(usage)
            counts = cell_summary(cell)
            log.info("%s/%s %s: %s", smk.wildcards.dataset, smk.wildcards.model, condition, counts)
            write_jsonl(judgments, cell)
            write_json(summary, counts)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
