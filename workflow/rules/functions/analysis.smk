# Input functions, wildcard patterns and output lists of the analysis stage (its rules: ../analysis.smk).

# Analysis reads the judging stage's files (judgments or external qrels, nDCG tables, human qrels, topics,
# run metadata) and config only through params: each table/figure rule gets just the keys it depends on.
ANALYSIS_TABLES = {
    "kappa": ["kappa_agreement"],
    "win_rate": ["table3_win_rate", "table3_significance"],
    "label_shift": ["label_shift"],
    "ranking": ["table4_ranking_agreement", "table4_ranking_agreement_paper"],
    "displacement": ["table5_rank_displacement"],
    "displacement_ci": ["table6_displacement_ci"],
    "sensitive": ["table7_sensitive_systems", "table7_sensitive_systems_paper"],
    "direction": ["direction_consistency", "direction_consistency_counts"],
    "sources": ["persona_sources"],
    "vs_paper": ["vs_paper", "vs_paper_summary"],
}
ANALYSIS_FIGURES = ["figure1_kappa_heatmap", "label_shift", "figure2_ndcg_scatter"]


def analysis_order():
    """Datasets, models and conditions in config order (tables and figures list them so)."""
    # _check_judging_config keeps external judgments to configured datasets, so _USED_CONDITIONS holds
    # exactly the conditions of these datasets.
    return {
        "dataset": judging_datasets(),
        "model": [*judge_models(), *external_judges()],
        "condition": [c for c in _judging.CONDITIONS if c in _USED_CONDITIONS],
    }


def analysis_label_cells(wildcards):
    """(model, condition) of every judged cell of a dataset (human excluded), in input order."""
    return [
        cell for cell in judging_cells(wildcards.dataset) if cell[0] != _judging.HUMAN
    ]


def analysis_label_files(wildcards):
    """Per label cell: the judgments file of a judge model, the qrels of an external judgment."""
    return [
        (
            f"results/judging/{wildcards.dataset}/judgments/{model}/{condition}.jsonl"
            if model in judge_models()
            else f"results/judging/{wildcards.dataset}/qrels/{model}/{condition}.qrels"
        )
        for model, condition in analysis_label_cells(wildcards)
    ]


def analysis_ndcg_cells(wildcards):
    return judging_cells(wildcards.dataset)


def analysis_ndcg_files(wildcards):
    return [
        f"results/judging/{wildcards.dataset}/ndcg/{m}/{c}.tsv"
        for m, c in analysis_ndcg_cells(wildcards)
    ]


def analysis_figure_options():
    """Only the figure keys, so that editing them reruns the figures and no table."""
    keys = ("figure_width_in", "font_size", "panel_columns", "dpi")
    return {key: config["analysis"][key] for key in keys}


def analysis_table_files(family):
    return [
        f"results/tables/{name}.{ext}"
        for name in ANALYSIS_TABLES[family]
        for ext in ("csv", "md", "tex")
    ]


def analysis_outputs():
    """Every table (csv, md, tex) and figure (png, pdf) of the persona study."""
    tables = [
        path for family in ANALYSIS_TABLES for path in analysis_table_files(family)
    ]
    tables += domain_agreement_outputs()
    if config["analysis"]["table2_check"]:
        tables += [f"results/tables/table2_check.{ext}" for ext in ("csv", "md", "tex")]
    return tables + [
        f"results/figures/{name}.{ext}"
        for name in ANALYSIS_FIGURES
        for ext in ("png", "pdf")
    ]


ANALYSIS_KAPPA = expand(
    "results/analysis/{dataset}/kappa.tsv", dataset=judging_datasets()
)
ANALYSIS_SHIFT = expand(
    "results/analysis/{dataset}/label_shift.tsv", dataset=judging_datasets()
)
ANALYSIS_SYSTEMS = expand(
    "results/analysis/{dataset}/systems.tsv", dataset=judging_datasets()
)


def table2_check_inputs(wildcards):
    """The persona selections of the Table 2 check's dataset, one per configured pool."""
    check = config["analysis"]["table2_check"]
    if check["dataset"] not in judging_datasets():
        raise StressprobeError(
            f"analysis.table2_check.dataset: '{check['dataset']}' is not a judging dataset "
            f"({', '.join(judging_datasets())}); fix the name or set the key to null"
        )
    return {
        "personas": [
            f"results/judging/{check['dataset']}/personas/{source}.jsonl"
            for source in check["sources"]
        ],
        "values": check["values"],
    }
