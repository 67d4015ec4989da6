"""Summarize every pair of a dataset once (or pass the passages through when summarization is off)."""

from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.llm import open_client
from stressprobe.llm.usage import Usage, usage_record
from stressprobe.persona.data import read_topics
from stressprobe.persona.judging import summarize_pairs
from stressprobe.persona.prompts import load_summary_template
from stressprobe.snakemake_io import cache_path, log, run_script


def main(smk):
    pairs = read_jsonl(smk.input.pairs)
    topics = read_topics(smk.input.topics)
    if smk.params.summarizer is None:
        records = summarize_pairs(None, pairs, topics, "", 0)
        write_json(smk.output.usage, usage_record("none", "none", Usage(), None))
    else:
        template = load_summary_template(smk.input.template)
        with open_client(smk.params.models, smk.params.summarizer, cache_path(smk)) as client:
            records = summarize_pairs(client, pairs, topics, template, smk.params.max_tokens)
            client.write_usage(smk.output.usage)
    failed = sum(record["status"] == "error" for record in records)
    if failed:
        log.warning(
            "%d of %d summaries failed; their pairs are recorded as errors by every judge",
            failed,
            len(records),
        )
    write_jsonl(smk.output.summaries, records)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
