"""One judge cell: every summarized pair of a dataset judged by one model under one condition."""

from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.llm import open_client
from stressprobe.persona.calibration import calibrate_records
from stressprobe.persona.data import read_topics
from stressprobe.persona.judging import (
    cell_summary,
    condition_personas,
    condition_settings,
    judge_cell,
    split_condition,
)
from stressprobe.persona.prompts import load_judge_template
from stressprobe.snakemake_io import cache_path, log, run_script


def main(smk):
    source, role = split_condition(f"{smk.wildcards.source}/{smk.wildcards.role}")
    summaries = read_jsonl(smk.input.summaries)
    topics = read_topics(smk.input.topics)
    template = load_judge_template(smk.input.template).with_system(smk.params.system_message)
    # The workflow passes a persona table only to retrieved conditions.
    path = smk.input.get("personas", "")
    records = read_jsonl(path) if path else None
    fixed = {role: smk.params.persona} if smk.params.persona is not None else {}
    personas = condition_personas(topics, source, role, fixed, records, path)
    settings = condition_settings(
        template,
        f"{source}/{role}",
        smk.params.max_tokens,
        smk.params.logprobs,
        smk.params.prefill,
        smk.params.delivery,
        smk.params.reader,
    )
    with open_client(smk.params.models, smk.wildcards.model, cache_path(smk)) as client:
        records = judge_cell(client, summaries, topics, personas, settings)
        client.write_usage(smk.output.usage)
    records = calibrate_records(records, smk.params.calibration)
    counts = {**cell_summary(records), "calibrated": sum(r["label_source"] == "calibrated" for r in records)}
    log.info("%s/%s %s/%s: %s", smk.wildcards.dataset, smk.wildcards.model, source, role, counts)
    write_jsonl(smk.output.judgments, records)
    write_json(smk.output.summary, counts)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
