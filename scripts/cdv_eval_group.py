"""Evaluate one vLLM model on every search cell of a dataset, loading it once (rule cdv_eval_vllm): per
cell, the originals, perturbed questions and baselines, and with mitigation the originals and perturbed
questions under the focus instruction; the same files as cdv_eval and cdv_mitigation write per cell."""

from stressprobe.cdv.clients import role_clients, write_merged_usage
from stressprobe.cdv.evaluate import eval_items, evaluate
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.snakemake_io import cache_path, log, run_script


def main(smk):
    cells = smk.params.cells
    mitigation = list(zip(smk.output.mitigation, smk.output.mitigation_usage, strict=True))
    with role_clients(smk.params.models, {"eval": smk.wildcards.model}, cache_path(smk)) as clients:
        for i, cell in enumerate(cells):
            questions = read_jsonl(smk.input[f"questions_{i}"])
            perturbed = read_jsonl(smk.input[f"perturbed_{i}"])
            baselines_path = smk.input.get(f"baselines_{i}", "")
            baselines = read_jsonl(baselines_path) if baselines_path else []
            jobs = [
                (
                    False,
                    eval_items(questions, perturbed, baselines),
                    smk.output.records[i],
                    smk.output.usage[i],
                )
            ]
            if mitigation:
                # As cdv_mitigation: originals and perturbed questions only, no baselines.
                jobs.append((True, eval_items(questions, perturbed, []), *mitigation[i]))
            for mitigated, items, records_path, usage_path in jobs:
                for client in clients.values():
                    client.reset_usage()  # each output's sidecar counts its own calls
                records = evaluate(
                    clients["eval"],
                    items,
                    smk.params.max_tokens,
                    smk.params.seed,
                    mitigated,
                    smk.params.prefill,
                    smk.params.temperature,
                )
                write_merged_usage(clients, usage_path)
                write_jsonl(records_path, records)
                log.info(
                    "%s/%s: %d records (mitigation %s)",
                    *cell,
                    len(records),
                    mitigated,
                )


run_script(main, snakemake)  # noqa: F821
