"""Evaluate one model on a CDV cell: its originals picked from the dataset's shared file (rule
cdv_eval_originals; asked here where the cell is the dataset's one cell evaluating the model), its perturbed questions and baselines asked here (or, with mitigation, the perturbed
questions under the focus instruction)."""

from stressprobe.cdv.jobs import EvalCell, EvalSettings, evaluate_cell
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    p, w = smk.params, smk.wildcards
    cell = EvalCell(
        f"{w.proxy}/{w.victim}",
        smk.input.questions,
        smk.input.perturbed,
        # Only cdv_eval has a baselines input (when baselines are enabled); cdv_mitigation never does.
        smk.input.get("baselines", ""),
        smk.output.records,
        smk.output.usage,
    )
    settings = EvalSettings.of(**p.answering, prompts=p.prompts)
    # No shared originals where the dataset's one cell evaluating the model asks its own.
    originals = smk.input.get("originals", "")
    evaluate_cell(p.models, w.model, cache_path(smk), cell, originals, settings, p.mitigation)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
