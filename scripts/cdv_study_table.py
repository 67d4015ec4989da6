"""One table of the CDV paper's experiments (csv, md, tex), chosen by the output's name."""

from stressprobe.cdv import paper_report as pr
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem, write_table


def tables(smk) -> dict:
    """Every study table this job's inputs allow, by name."""
    inputs, built = smk.input, {}
    if hasattr(inputs, "evals"):
        built["cdv_experiments"] = pr.experiments_table(
            smk.params.experiments,
            inputs.evals,
            inputs.questions,
            smk.params.seed,
            list(getattr(inputs, "experiment_mitigation", [])),
        )
    if hasattr(inputs, "classifier"):
        built["cdv_classifier_study"] = pr.classifier_study_table(inputs.classifier, list(inputs.lora))
    if hasattr(inputs, "transfer"):
        built["cdv_classifier_transfer"] = pr.transfer_table(inputs.transfer)
    if hasattr(inputs, "release"):
        built["cdv_classifier_release"] = pr.release_table(inputs.release, list(inputs.release_lora))
    if hasattr(inputs, "cost_summaries"):
        built["cdv_filter_cost"] = pr.filter_cost_table(inputs.cost_summaries)
    if hasattr(inputs, "all_evals"):
        from stressprobe.cdv import report

        built["cdv_baselines"] = report.baselines_table(inputs.all_evals)
        if hasattr(inputs, "mitigation"):
            built["cdv_mitigation"] = report.mitigation_table(inputs.all_evals, inputs.mitigation)
    if hasattr(inputs, "dpo"):
        built["cdv_dpo"] = pr.dpo_table(list(inputs.dpo), list(inputs.compare))
    if hasattr(inputs, "human"):
        from stressprobe.cdv.human_eval import table8

        built["cdv_human_eval"] = table8(list(inputs.human))
    if hasattr(inputs, "variant_summaries"):
        from stressprobe.cdv.search_report import value_ablation_table

        # variant_summaries holds each ablated cell's own summary and its variants' (cdv_variant_files).
        built["cdv_value_ablation"] = value_ablation_table(list(inputs.variant_summaries))
    if hasattr(inputs, "benchmark"):
        built["cdv_benchmark"] = pr.benchmark_table(list(inputs.benchmark))
    return built


def main(smk):
    name = smk.wildcards.cdv_study_table
    built = tables(smk)
    if name == "cdv_vs_paper":
        from stressprobe.cdv.search_report import agreement_table, mean_pairwise_agreement
        from stressprobe.cdv.search_shares import search_share_rows

        agreement = mean_pairwise_agreement(agreement_table(list(smk.input.searches)))
        extra = [] if agreement is None else [pr.run_row("agreement", "pairwise_agreement", agreement)]
        extra += search_share_rows(list(smk.input.label_searches))
        run = pr.run_values(built) + extra
        table = pr.vs_paper_table(pr.read_paper_values(smk.input.paper_values), run)
    else:
        table = built[name]
    write_table(table, stem(smk.output.table), decimals={})


run_script(main, snakemake)  # noqa: F821
