"""The cost estimate: calls, tokens and dollars each cell still needs (cached calls are free)."""

from pathlib import Path

from stressprobe.cdv.experiments import nested_sample
from stressprobe.cost import CacheView, cdv_eval_bounds, cdv_search_bounds, judging_estimates, write_estimate
from stressprobe.datasets import read_topics
from stressprobe.io import read_jsonl
from stressprobe.prompts import JUDGE_PLACEHOLDERS, SUMMARY_PLACEHOLDERS, load_template
from stressprobe.snakemake_io import cache_path, log, run_script


def main(smk):
    judging = smk.params.judging
    templates = {
        "judge": load_template(smk.input.judge_template, required=JUDGE_PLACEHOLDERS),
        "summary": load_template(smk.input.summary_template, required=SUMMARY_PLACEHOLDERS),
    }
    cache = CacheView(cache_path(smk))
    rows = []
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
            )
    finally:
        cache.close()
    for cell in smk.params.cdv_cells:
        dataset, roles = cell["dataset"], cell["roles"]
        questions = nested_sample(read_jsonl(smk.input[f"cdv_{dataset}"]), cell.get("n"), cell.get("seed", 0))
        rows += cdv_search_bounds(dataset, questions, roles, smk.params.cdv, smk.params.models)
        name = f"{roles['proxy']}/{roles['victim']}"
        rows += cdv_eval_bounds(
            dataset, questions, name, cell["eval_models"], smk.params.cdv, smk.params.models
        )
    markdown = write_estimate(rows, smk.output.csv, smk.output.md)
    log.info("%d cells, %d calls to make", len(rows), sum(r.to_call for r in rows))
    print(markdown)


run_script(main, snakemake)  # noqa: F821
