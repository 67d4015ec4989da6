"""One job per CDV dataset for the vLLM models that both search and evaluate (rule cdv_vllm_served): each
served side by side by its own vLLM server, the searches of their cells first, then their evaluations on
every cell of the dataset; the same files as cdv_search, cdv_eval_vllm (cdv_eval, cdv_mitigation) write."""

from pathlib import Path

from stressprobe.cdv.jobs import (
    EvalSettings,
    SearchFiles,
    ServedEval,
    ServedSearch,
    group_cells,
    search_settings,
    served_dataset,
)
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    params, out = smk.params, smk.output
    cells = [tuple(cell) for cell in params.cells]
    questions = [smk.input[f"questions_{i}"] for i in range(len(cells))]
    searched = [tuple(search["cell"]) for search in params.searches]
    searches = [
        ServedSearch(
            questions[cells.index(cell)],
            search["roles"],
            search_settings(
                params.search,
                params.classifier_threshold,
                params.seed,
                search["victim_prefill"],
                search["eval_temperature"],
                "paper",
                params.prompts,
            ),
            SearchFiles(out.search[k], out.perturbed[k], out.summary[k], out.search_usage[k]),
        )
        for k, (cell, search) in enumerate(zip(searched, params.searches, strict=True))
    ]
    # A cell searched here reads its own output; the others' perturbed questions are inputs.
    perturbed = [
        smk.input.get(f"perturbed_{i}") or out.perturbed[searched.index(cell)] for i, cell in enumerate(cells)
    ]
    baselines = [smk.input.get(f"baselines_{i}", "") for i in range(len(cells))]
    evaluations = []
    for j, evaluation in enumerate(params.evals):
        part = slice(j * len(cells), (j + 1) * len(cells))
        evaluations.append(
            ServedEval(
                evaluation["model"],
                group_cells(
                    cells,
                    questions,
                    perturbed,
                    baselines,
                    out.records[part],
                    out.usage[part],
                    out.mitigation[part],
                    out.mitigation_usage[part],
                ),
                EvalSettings.of(
                    evaluation["max_tokens"],
                    evaluation["temperature"],
                    evaluation["prefill"],
                    params.seed,
                    params.prompts,
                ),
            )
        )
    served_dataset(
        params.models,
        params.served,
        cache_path(smk),
        smk.wildcards.dataset,
        searches,
        evaluations,
        str(Path(smk.log[0]).with_suffix("")),
        params.seed,
    )


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
