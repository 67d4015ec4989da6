# Persona study analysis. Two per-dataset rules turn the judging stage's files into tidy frames
# (results/analysis/{dataset}/: per-query kappa, label shifts, system scores); then one rule per table or
# figure family reads those frames. Config reaches each rule only through the params it depends on
# (e.g. rbo_phi -> Table 4 and the source comparison; bootstrap -> Table 6; figure keys -> figures), so an
# edit regenerates exactly the affected outputs and never a judge cell. All rules are light: localrule.
# Input functions and the output list come first, then the rules.


include: "functions/analysis.smk"


rule analysis_judgments:
    input:
        labels=analysis_label_files,
        human="results/data/{dataset}/qrels.txt",
    output:
        kappa="results/analysis/{dataset}/kappa.tsv",
        shift="results/analysis/{dataset}/label_shift.tsv",
    log:
        "results/logs/analysis/{dataset}/judgments.log",
    wildcard_constraints:
        dataset=DATASET_RE,
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["data"],
    params:
        cells=analysis_label_cells,
        unparsed=config["judging"]["unparsed"],
        kappa_weights=config["analysis"]["kappa_weights"],
    script:
        "../../scripts/analysis_judgments.py"


rule analysis_systems:
    input:
        ndcg=analysis_ndcg_files,
        topics=TOPICS,
    output:
        "results/analysis/{dataset}/systems.tsv",
    log:
        "results/logs/analysis/{dataset}/systems.log",
    wildcard_constraints:
        dataset=DATASET_RE,
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        cells=analysis_ndcg_cells,
    script:
        "../../scripts/analysis_systems.py"


rule analysis_kappa_table:
    input:
        kappa=ANALYSIS_KAPPA,
    output:
        **table_outputs(
            "kappa_agreement", "kappa_agreement", "Persona study", "Judgment level"
        ),
    log:
        "results/logs/analysis/kappa_table.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
    script:
        "../../scripts/analysis_kappa_table.py"


rule analysis_kappa_figure:
    input:
        kappa=ANALYSIS_KAPPA,
    output:
        **figure_outputs(
            "figure1_kappa_heatmap",
            "figure1_kappa_heatmap",
            "Persona study",
            "Judgment level",
        ),
    log:
        "results/logs/analysis/kappa_figure.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
        figure=analysis_figure_options(),
    script:
        "../../scripts/analysis_kappa_figure.py"


rule analysis_win_rate:
    input:
        kappa=ANALYSIS_KAPPA,
    output:
        **table_outputs(
            "table3_win_rate", "table3_win_rate", "Persona study", "Judgment level"
        ),
        **table_outputs(
            "table3_significance",
            "table3_significance",
            "Persona study",
            "Judgment level",
            key="detail",
        ),
    log:
        "results/logs/analysis/win_rate.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
        alpha=config["analysis"]["alpha"],
        undefined_kappa=config["analysis"]["undefined_kappa"],
    script:
        "../../scripts/analysis_win_rate.py"


rule analysis_label_shift_table:
    input:
        shift=ANALYSIS_SHIFT,
    output:
        **table_outputs("label_shift", "label_shift", "Persona study", "Judgment level"),
    log:
        "results/logs/analysis/label_shift_table.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
    script:
        "../../scripts/analysis_label_shift_table.py"


rule analysis_label_shift_figure:
    input:
        shift=ANALYSIS_SHIFT,
    output:
        **figure_outputs(
            "label_shift", "label_shift", "Persona study", "Judgment level"
        ),
    log:
        "results/logs/analysis/label_shift_figure.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
        figure=analysis_figure_options(),
    script:
        "../../scripts/analysis_label_shift_figure.py"


rule analysis_ndcg_scatter:
    input:
        systems=ANALYSIS_SYSTEMS,
    output:
        **figure_outputs(
            "figure2_ndcg_scatter",
            "figure2_ndcg_scatter",
            "Persona study",
            "System level",
        ),
    log:
        "results/logs/analysis/ndcg_scatter.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
        figure={
            **analysis_figure_options(),
            "figure2_width_in": config["analysis"]["figure2_width_in"],
        },
    script:
        "../../scripts/analysis_ndcg_scatter.py"


rule analysis_ranking_agreement:
    input:
        systems=ANALYSIS_SYSTEMS,
        shift=ANALYSIS_SHIFT,
    output:
        **table_outputs(
            "table4_ranking_agreement",
            "table4_ranking_agreement",
            "Persona study",
            "System level",
        ),
        **table_outputs(
            "table4_ranking_agreement_paper",
            "table4_ranking_agreement_paper",
            "Persona study",
            "System level",
            key="paper",
        ),
    log:
        "results/logs/analysis/ranking_agreement.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
        rbo_phi=config["analysis"]["rbo_phi"],
    script:
        "../../scripts/analysis_ranking_agreement.py"


rule analysis_rank_displacement:
    input:
        systems=ANALYSIS_SYSTEMS,
        shift=ANALYSIS_SHIFT,
    output:
        **table_outputs(
            "table5_rank_displacement",
            "table5_rank_displacement",
            "Persona study",
            "Sensitivity",
        ),
    log:
        "results/logs/analysis/rank_displacement.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
    script:
        "../../scripts/analysis_rank_displacement.py"


rule analysis_displacement_ci:
    input:
        systems=ANALYSIS_SYSTEMS,
        shift=ANALYSIS_SHIFT,
    output:
        **table_outputs(
            "table6_displacement_ci",
            "table6_displacement_ci",
            "Persona study",
            "Sensitivity",
        ),
    log:
        "results/logs/analysis/displacement_ci.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
        bootstrap=config["analysis"]["bootstrap"],
    script:
        "../../scripts/analysis_displacement_ci.py"


rule analysis_sensitive_systems:
    input:
        systems=ANALYSIS_SYSTEMS,
        shift=ANALYSIS_SHIFT,
        run_metadata=expand(
            "results/data/{dataset}/run_metadata.tsv", dataset=judging_datasets()
        ),
    output:
        **table_outputs(
            "table7_sensitive_systems",
            "table7_sensitive_systems",
            "Persona study",
            "Sensitivity",
        ),
        **table_outputs(
            "table7_sensitive_systems_paper",
            "table7_sensitive_systems_paper",
            "Persona study",
            "Sensitivity",
            key="paper",
        ),
    log:
        "results/logs/analysis/sensitive_systems.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
        top_k=config["analysis"]["top_k_sensitive"],
        representative=config["analysis"]["representative_systems"],
    script:
        "../../scripts/analysis_sensitive_systems.py"


rule analysis_direction_consistency:
    input:
        systems=ANALYSIS_SYSTEMS,
        shift=ANALYSIS_SHIFT,
    output:
        **table_outputs(
            "direction_consistency",
            "direction_consistency",
            "Persona study",
            "Sensitivity",
        ),
        **table_outputs(
            "direction_consistency_counts",
            "direction_consistency_counts",
            "Persona study",
            "Sensitivity",
            key="counts",
        ),
    log:
        "results/logs/analysis/direction_consistency.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
    script:
        "../../scripts/analysis_direction_consistency.py"


rule analysis_persona_sources:
    input:
        kappa=ANALYSIS_KAPPA,
        systems=ANALYSIS_SYSTEMS,
        shift=ANALYSIS_SHIFT,
    output:
        **table_outputs(
            "persona_sources", "persona_sources", "Persona study", "Persona sources"
        ),
    log:
        "results/logs/analysis/persona_sources.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
        rbo_phi=config["analysis"]["rbo_phi"],
        undefined_kappa=config["analysis"]["undefined_kappa"],
    script:
        "../../scripts/analysis_persona_sources.py"


rule analysis_vs_paper:
    input:
        **(
            {"table2": "results/tables/table2_check.csv"}
            if config["analysis"]["table2_check"]
            else {}
        ),
        kappa=ANALYSIS_KAPPA,
        systems=ANALYSIS_SYSTEMS,
        values=config["analysis"]["vs_paper"]["values"],
    output:
        **table_outputs("vs_paper", "vs_paper", "Persona study", "Reproduction"),
        **table_outputs(
            "vs_paper_summary",
            "vs_paper_summary",
            "Persona study",
            "Reproduction",
            key="summary",
        ),
    log:
        "results/logs/analysis/vs_paper.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        order=analysis_order(),
        rbo_phi=config["analysis"]["rbo_phi"],
        bootstrap=config["analysis"]["bootstrap"],
        names=config["analysis"]["vs_paper"]["names"],
        undefined_kappa=config["analysis"]["undefined_kappa"],
        table2_check=config["analysis"]["table2_check"],
    script:
        "../../scripts/analysis_vs_paper.py"


# Only where the config turns the check on (its input function needs the key).
if config["analysis"]["table2_check"]:

    rule analysis_table2_check:
        input:
            unpack(table2_check_inputs),
        output:
            **table_outputs(
                "table2_check", "table2_check", "Persona study", "Reproduction"
            ),
        log:
            "results/logs/analysis/table2_check.log",
        localrule: True
        conda:
            "../../envs/analysis.yaml"
        resources:
            **config["resources"]["small"],
        params:
            sources=lambda w: config["analysis"]["table2_check"]["sources"],
            qid=lambda w: config["analysis"]["table2_check"]["qid"],
        script:
            "../../scripts/analysis_table2_check.py"
