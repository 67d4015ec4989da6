"""One judge cell: every summarized pair of a dataset judged by one model under one condition."""

from stressprobe.calibration import calibrate_records
from stressprobe.datasets import read_topics
from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.judging import (
    JudgeSettings,
    cell_summary,
    condition_personas,
    judge_cell,
    split_condition,
)
from stressprobe.llm import open_client
from stressprobe.prompts import JUDGE_PLACEHOLDERS, load_template
from stressprobe.snakemake_io import cache_path, log, run_script


def main(smk):
    source, role = split_condition(f"{smk.wildcards.source}/{smk.wildcards.role}")
    summaries = read_jsonl(smk.input.summaries)
    topics = read_topics(smk.input.topics)
    template = load_template(smk.input.template, required=JUDGE_PLACEHOLDERS)
    # The workflow passes a persona table only to retrieved conditions.
    path = smk.input.get("personas", "")
    records = read_jsonl(path) if path else None
    fixed = {role: smk.params.persona} if smk.params.persona is not None else {}
    personas = condition_personas(topics, source, role, fixed, records, path)
    with open_client(smk.params.models, smk.wildcards.model, cache_path(smk)) as client:
        settings = JudgeSettings(template, smk.params.max_tokens, smk.params.logprobs, smk.params.prefill)
        records = judge_cell(client, summaries, topics, personas, settings)
        client.write_usage(smk.output.usage)
    records = calibrate_records(records, smk.params.calibration)
    counts = {**cell_summary(records), "calibrated": sum(r["label_source"] == "calibrated" for r in records)}
    log.info("%s/%s %s/%s: %s", smk.wildcards.dataset, smk.wildcards.model, source, role, counts)
    write_jsonl(smk.output.judgments, records)
    write_json(smk.output.summary, counts)


run_script(main, snakemake)  # noqa: F821
