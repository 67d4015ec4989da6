"""Every judge cell of one dataset for one vLLM model, with the model loaded once and every cell's requests
handed to it in one call (rule judge_vllm)."""

from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.llm import open_client
from stressprobe.persona.data import read_topics
from stressprobe.persona.judging import (
    cell_summary,
    condition_personas,
    condition_settings,
    is_retrieved,
    judge_cells,
    split_condition,
)
from stressprobe.persona.prompts import load_judge_template
from stressprobe.snakemake_io import cache_path, log, run_script


def main(smk):
    summaries = read_jsonl(smk.input.summaries)
    topics = read_topics(smk.input.topics)
    template = load_judge_template(smk.input.template).with_system(smk.params.system_message)
    cells = []
    for condition in smk.params.conditions:
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
        cells.append((personas, settings))
    outputs = zip(
        smk.params.conditions, smk.output.judgments, smk.output.usage, smk.output.summary, strict=True
    )
    with open_client(smk.params.models, smk.wildcards.model, cache_path(smk)) as client:
        judged = judge_cells(client, summaries, topics, cells)
        # Retries are the job's, not a cell's: counted once, in the first sidecar, so sums stay right.
        judged[0][1].retries = client.usage.retries
        for (condition, judgments, usage, summary), (cell, cell_usage) in zip(outputs, judged, strict=True):
            client.write_usage(usage, cell_usage)
            counts = cell_summary(cell)
            log.info("%s/%s %s: %s", smk.wildcards.dataset, smk.wildcards.model, condition, counts)
            write_jsonl(judgments, cell)
            write_json(summary, counts)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
