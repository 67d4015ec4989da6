"""Evaluate one model on a benchmark file of perturbed questions (stressprobe.cdv.benchmark)."""

from stressprobe.cdv.benchmark import read_benchmark
from stressprobe.cdv.clients import role_clients, write_merged_usage
from stressprobe.cdv.evaluate import evaluate
from stressprobe.io import write_jsonl
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    items, answering = read_benchmark(smk.input.questions), smk.params.answering
    with role_clients(smk.params.models, {"eval": smk.wildcards.model}, cache_path(smk)) as clients:
        records = evaluate(
            clients["eval"],
            items,
            answering["max_tokens"],
            answering["seed"],
            prefill=answering["prefill"],
            temperature=answering["temperature"],
        )
        write_merged_usage(clients, smk.output.usage)
    for record, item in zip(records, items, strict=True):
        record["source"] = item["source"]
    write_jsonl(smk.output.records, records)


run_script(main, snakemake)  # noqa: F821
