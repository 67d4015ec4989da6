# CDV tables and figures: the search and evaluation tables, the paper's experiment tables and the
# comparison with every published value.


include: "functions/cdv_study.smk"


wildcard_constraints:
    cdv_table="|".join(_CDV_TABLE_BUILDERS),
    cdv_figure="cdv_[a-z_]+",


# Every CDV table, by name (stressprobe.cdv.study_tables): its inputs and settings are its own.
rule cdv_table:
    input:
        unpack(lambda w: cdv_table_inputs(w.cdv_table)),
    output:
        **table_outputs("{cdv_table}", "cdv", "CDV study", "Tables"),
    log:
        "results/logs/cdv/tables/{cdv_table}.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        settings=lambda w: cdv_table_settings(w.cdv_table),
    script:
        "../../scripts/cdv_table.py"


rule cdv_figure:
    input:
        searches=cdv_cell_files("search.jsonl"),
        evals=cdv_eval_files("eval"),
    output:
        **figure_outputs("{cdv_figure}", "cdv", "CDV study", "Figures"),
    log:
        "results/logs/cdv/figures/{cdv_figure}.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        figure=analysis_figure_options(),
    script:
        "../../scripts/cdv_figure.py"


ruleorder: cdv_study_figure > cdv_figure


rule cdv_study_figure:
    input:
        table="results/tables/{cdv_study_figure}.csv",
    output:
        **figure_outputs("{cdv_study_figure}", "cdv", "CDV study", "Figures"),
    log:
        "results/logs/cdv/figures/{cdv_study_figure}.log",
    wildcard_constraints:
        cdv_study_figure="cdv_experiments|cdv_classifier_study",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        figure=analysis_figure_options(),
    script:
        "../../scripts/cdv_study_figure.py"


# Appendix B: the human evaluation's sheet of original/perturbed pairs, for people to fill (Table 8 is
# the study table cdv_human_eval, read from the filled sheets named in `cdv.human_eval.filled`).
rule cdv_human_export:
    input:
        perturbed=[f"{cdv_cell_dir(*c)}/perturbed.jsonl" for c in cdv_human_cells()],
        questions=[CDV_QUESTIONS.format(dataset=d) for d, _, _ in cdv_human_cells()],
    output:
        "results/cdv/human_eval/sheet.csv",
    log:
        "results/logs/cdv/human_export.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        n=config["cdv"]["human_eval"]["n"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_human_export.py"
