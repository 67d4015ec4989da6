# Input functions and output lists of the CDV tables and figures (its rules: ../cdv_study.smk).


CDV_TABLES = ["cdv_search", "cdv_accuracy"]
CDV_FIGURES = ["cdv_matrix", "cdv_distribution", "cdv_agreement", "cdv_depth"]


def cdv_table_names():
    names = list(CDV_TABLES)
    if cdv_value_variants():
        names.append("cdv_value_ablation")
    if config["cdv"]["baselines"]["enabled"]:
        names.append("cdv_baselines")
    if config["cdv"]["mitigation"]["enabled"]:
        names.append("cdv_mitigation")
    if config["cdv"]["classifier"]["kind"] != "none":
        names.append("cdv_classifier")
    if config["cdv"]["classifier"]["prompt_models"]:
        names.append("cdv_classifier_study")
    if cdv_cost_study():
        names.append("cdv_filter_cost")
    if config["cdv"]["experiments"]:
        names.append("cdv_experiments")
    if config["cdv"]["dpo"]["train"]:
        names.append("cdv_dpo")
    if config["cdv"]["paper_values"]:
        names.append("cdv_vs_paper")
    return names


def cdv_outputs():
    """The CDV study's tables and figures (and the DPO pairs when exported); nothing without cells."""
    if not cdv_cells():
        return []
    outputs = [
        f"results/tables/{n}.{ext}"
        for n in cdv_table_names()
        for ext in ("csv", "md", "tex")
    ]
    outputs += [
        f"results/figures/{n}.{ext}" for n in CDV_FIGURES for ext in ("png", "pdf")
    ]
    # Figures 2/6 and 5, drawn from the study tables when those are built.
    outputs += [
        f"results/figures/{n}.{ext}"
        for n in ("cdv_experiments", "cdv_classifier_study")
        if n in cdv_table_names()
        for ext in ("png", "pdf")
    ]
    if config["cdv"]["dpo"]["export"]:
        outputs += ["results/cdv/dpo/train.jsonl", "results/cdv/dpo/test.jsonl"]
    if config["cdv"]["dpo"]["train"]:
        outputs += ["results/cdv/dpo/model/done.json"]
    return outputs


CDV_STUDY_TABLES = [
    "cdv_experiments",
    "cdv_classifier_study",
    "cdv_filter_cost",
    "cdv_dpo",
    "cdv_vs_paper",
]


def cdv_study_inputs(name):
    """What each study table reads; cdv_vs_paper reads every one the config turns on."""
    classifier = config["cdv"]["classifier"]
    parts = {
        "cdv_experiments": (
            {
                "evals": cdv_eval_files("eval"),
                "questions": expand(CDV_QUESTIONS, dataset=cdv_datasets()),
            }
            if config["cdv"]["experiments"]
            else {}
        ),
        "cdv_classifier_study": (
            {
                "classifier": "results/cdv/classifier/metrics.json",
                "lora": [
                    f"results/cdv/classifier/lora/{f}.json" for f in cdv_lora_models()
                ],
            }
            if classifier["prompt_models"]
            else {}
        ),
        "cdv_filter_cost": (
            {
                "cost_summaries": [
                    f"{cdv_cell_dir(*cell)}/search.summary.json"
                    for cell in cdv_cost_cells()
                ]
            }
            if cdv_cost_study()
            else {}
        ),
        "cdv_dpo": (
            {"dpo": "results/cdv/dpo/model/done.json"}
            if config["cdv"]["dpo"]["train"]
            else {}
        ),
    }
    if name != "cdv_vs_paper":
        return parts[name]
    merged = {
        "paper_values": config["cdv"]["paper_values"],
        "all_evals": cdv_eval_files("eval"),
    }
    if config["cdv"]["mitigation"]["enabled"]:
        merged["mitigation"] = cdv_eval_files("mitigation")
    for part in parts.values():
        merged.update(part)
    return merged
