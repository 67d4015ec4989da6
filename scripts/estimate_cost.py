"""The cost estimate: calls, tokens and dollars each cell still needs (cached calls are free)."""

from pathlib import Path

from stressprobe.cdv.benchmark import read_benchmark
from stressprobe.cdv.cost_bounds import cdv_benchmark_estimates, cdv_estimates
from stressprobe.cdv.jobs import job_prompts
from stressprobe.cost import CacheView, write_estimate
from stressprobe.io import read_jsonl
from stressprobe.persona.cost_estimate import judging_estimates
from stressprobe.persona.data import read_topics
from stressprobe.persona.prompts import load_judge_template, load_summary_template
from stressprobe.preflight import run_preflight
from stressprobe.snakemake_io import cache_path, log, run_script


def main(smk):
    judging = smk.params.judging
    judge = load_judge_template(smk.input.judge_template).with_system(judging["system_message"])
    templates = {
        "judge": judge.user,
        "judge_system": judge.system,
        "summary": load_summary_template(smk.input.summary_template),
    }
    cache = CacheView(cache_path(smk))
    rows, asks = [], []
    try:
        for dataset, summarizer in smk.params.summarizers.items():
            tables = {
                source: (read_jsonl(smk.input[f"{dataset}_{source}"]), smk.input[f"{dataset}_{source}"])
                for source in smk.params.persona_sources
            }
            # Summaries are read when an earlier run wrote them, never built for the estimate (they cost).
            summaries_path = Path(smk.params.summaries[dataset])
            summaries = read_jsonl(summaries_path) if summarizer and summaries_path.is_file() else None
            rows += judging_estimates(
                dataset,
                read_jsonl(smk.input[f"{dataset}_pairs"]),
                read_topics(smk.input[f"{dataset}_topics"]),
                summaries,
                tables,
                judging,
                smk.params.fixed_personas,
                summarizer,
                smk.params.models,
                templates,
                cache,
                deliveries=smk.params.deliveries,
                asks=asks,
            )
    finally:
        cache.close()
    datasets = {cell["dataset"] for cell in smk.params.cdv_cells}
    questions = {dataset: read_jsonl(smk.input[f"cdv_{dataset}"]) for dataset in datasets}
    if datasets:
        # The prompts the CDV jobs send (the template file's when one is configured) size the bounds.
        prompts = job_prompts(smk.params.cdv_prompts)
        rows += cdv_estimates(
            smk.params.cdv_cells, questions, smk.params.cdv, smk.params.models, asks, prompts
        )
    # Benchmark files are read; the DPO held-out split (None) does not exist before the searches.
    benchmarks = {
        name: None if name == smk.params.dpo_heldout else read_benchmark(smk.input[f"cdv_benchmark_{name}"])
        for name in smk.params.cdv_benchmarks
    }
    rows += cdv_benchmark_estimates(
        benchmarks,
        smk.params.cdv_benchmarks,
        smk.params.cdv_cells,
        questions,
        smk.params.cdv,
        smk.params.models,
    )
    # The preflight beside the cost (free: model listings, no completion); problems are shown, not raised.
    longest = {}
    for row in rows:
        longest[row.model] = max(longest.get(row.model, 0), row.longest_request)
    findings = run_preflight(
        smk.params.preflight_models,
        smk.params.models,
        smk.params.run_days,
        longest,
        trained=smk.params.trained,
        pools=smk.params.pools,
        unpinned=smk.params.unpinned,
    )
    markdown = write_estimate(
        rows,
        smk.output.csv,
        smk.output.md,
        smk.params.models,
        smk.output.models,
        asks,
        smk.output.overlap,
        findings,
    )
    log.info("%d cells, %d calls to make", len(rows), sum(r.to_call for r in rows))
    print(markdown)


run_script(main, snakemake)  # noqa: F821
