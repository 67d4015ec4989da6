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
    script:
        "../../scripts/analysis_judgments.py"


rule analysis_systems:
    input:
        ndcg=analysis_ndcg_files,
        topics="results/data/{dataset}/topics.tsv",
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
        table=report(
            "results/tables/kappa_agreement.csv",
            caption="../report/kappa_agreement.rst",
            category="Persona study",
            subcategory="Judgment level",
        ),
        table_md="results/tables/kappa_agreement.md",
        table_tex="results/tables/kappa_agreement.tex",
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
        png=report(
            "results/figures/figure1_kappa_heatmap.png",
            caption="../report/figure1_kappa_heatmap.rst",
            category="Persona study",
            subcategory="Judgment level",
        ),
        pdf="results/figures/figure1_kappa_heatmap.pdf",
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
        table=report(
            "results/tables/table3_win_rate.csv",
            caption="../report/table3_win_rate.rst",
            category="Persona study",
            subcategory="Judgment level",
        ),
        table_md="results/tables/table3_win_rate.md",
        table_tex="results/tables/table3_win_rate.tex",
        detail=report(
            "results/tables/table3_significance.csv",
            caption="../report/table3_significance.rst",
            category="Persona study",
            subcategory="Judgment level",
        ),
        detail_md="results/tables/table3_significance.md",
        detail_tex="results/tables/table3_significance.tex",
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
    script:
        "../../scripts/analysis_win_rate.py"


rule analysis_label_shift_table:
    input:
        shift=ANALYSIS_SHIFT,
    output:
        table=report(
            "results/tables/label_shift.csv",
            caption="../report/label_shift.rst",
            category="Persona study",
            subcategory="Judgment level",
        ),
        table_md="results/tables/label_shift.md",
        table_tex="results/tables/label_shift.tex",
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
        png=report(
            "results/figures/label_shift.png",
            caption="../report/label_shift.rst",
            category="Persona study",
            subcategory="Judgment level",
        ),
        pdf="results/figures/label_shift.pdf",
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
        png=report(
            "results/figures/figure2_ndcg_scatter.png",
            caption="../report/figure2_ndcg_scatter.rst",
            category="Persona study",
            subcategory="System level",
        ),
        pdf="results/figures/figure2_ndcg_scatter.pdf",
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
    output:
        table=report(
            "results/tables/table4_ranking_agreement.csv",
            caption="../report/table4_ranking_agreement.rst",
            category="Persona study",
            subcategory="System level",
        ),
        table_md="results/tables/table4_ranking_agreement.md",
        table_tex="results/tables/table4_ranking_agreement.tex",
        paper=report(
            "results/tables/table4_ranking_agreement_paper.csv",
            caption="../report/table4_ranking_agreement_paper.rst",
            category="Persona study",
            subcategory="System level",
        ),
        paper_md="results/tables/table4_ranking_agreement_paper.md",
        paper_tex="results/tables/table4_ranking_agreement_paper.tex",
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
    output:
        table=report(
            "results/tables/table5_rank_displacement.csv",
            caption="../report/table5_rank_displacement.rst",
            category="Persona study",
            subcategory="Sensitivity",
        ),
        table_md="results/tables/table5_rank_displacement.md",
        table_tex="results/tables/table5_rank_displacement.tex",
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
    output:
        table=report(
            "results/tables/table6_displacement_ci.csv",
            caption="../report/table6_displacement_ci.rst",
            category="Persona study",
            subcategory="Sensitivity",
        ),
        table_md="results/tables/table6_displacement_ci.md",
        table_tex="results/tables/table6_displacement_ci.tex",
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
        run_metadata=expand(
            "results/data/{dataset}/run_metadata.tsv", dataset=judging_datasets()
        ),
    output:
        table=report(
            "results/tables/table7_sensitive_systems.csv",
            caption="../report/table7_sensitive_systems.rst",
            category="Persona study",
            subcategory="Sensitivity",
        ),
        table_md="results/tables/table7_sensitive_systems.md",
        table_tex="results/tables/table7_sensitive_systems.tex",
        paper=report(
            "results/tables/table7_sensitive_systems_paper.csv",
            caption="../report/table7_sensitive_systems_paper.rst",
            category="Persona study",
            subcategory="Sensitivity",
        ),
        paper_md="results/tables/table7_sensitive_systems_paper.md",
        paper_tex="results/tables/table7_sensitive_systems_paper.tex",
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
    output:
        table=report(
            "results/tables/direction_consistency.csv",
            caption="../report/direction_consistency.rst",
            category="Persona study",
            subcategory="Sensitivity",
        ),
        table_md="results/tables/direction_consistency.md",
        table_tex="results/tables/direction_consistency.tex",
        counts=report(
            "results/tables/direction_consistency_counts.csv",
            caption="../report/direction_consistency_counts.rst",
            category="Persona study",
            subcategory="Sensitivity",
        ),
        counts_md="results/tables/direction_consistency_counts.md",
        counts_tex="results/tables/direction_consistency_counts.tex",
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
    output:
        table=report(
            "results/tables/persona_sources.csv",
            caption="../report/persona_sources.rst",
            category="Persona study",
            subcategory="Persona sources",
        ),
        table_md="results/tables/persona_sources.md",
        table_tex="results/tables/persona_sources.tex",
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
    script:
        "../../scripts/analysis_persona_sources.py"


rule analysis_vs_paper:
    input:
        kappa=ANALYSIS_KAPPA,
        systems=ANALYSIS_SYSTEMS,
        values=config["analysis"]["vs_paper"]["values"],
    output:
        table=report(
            "results/tables/vs_paper.csv",
            caption="../report/vs_paper.rst",
            category="Persona study",
            subcategory="Reproduction",
        ),
        table_md="results/tables/vs_paper.md",
        table_tex="results/tables/vs_paper.tex",
        summary=report(
            "results/tables/vs_paper_summary.csv",
            caption="../report/vs_paper_summary.rst",
            category="Persona study",
            subcategory="Reproduction",
        ),
        summary_md="results/tables/vs_paper_summary.md",
        summary_tex="results/tables/vs_paper_summary.tex",
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
    script:
        "../../scripts/analysis_vs_paper.py"
