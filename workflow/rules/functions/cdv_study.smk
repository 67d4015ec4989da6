# Input functions and output lists of the CDV tables and figures (its rules: ../cdv_study.smk).

from stressprobe.cdv.study_tables import BUILDERS as _CDV_TABLE_BUILDERS

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
    if config["cdv"]["classifier"]["table2"]["victims"]:
        names.append("cdv_classifier_transfer")
    if config["cdv"]["classifier"]["release"]["train"]:
        names.append("cdv_classifier_release")
    if config["cdv"]["experiments"]:
        names.append("cdv_experiments")
    if config["cdv"]["dpo"]["train"]:
        names.append("cdv_dpo")
    if cdv_benchmark_records():
        names.append("cdv_benchmark")
    if config["cdv"]["human_eval"]["filled"]:
        names.append("cdv_human_eval")
    if config["cdv"]["paper_values"]:
        names.append("cdv_vs_paper")
    return names


def cdv_human_cells():
    """(dataset, proxy, victim) of the human evaluation's cell per dataset (none when it is off)."""
    human = config["cdv"]["human_eval"]
    if not human["enabled"]:
        return []
    if (human["proxy"], human["victim"]) not in cdv_cell_specs():
        raise StressprobeError(
            f"cdv.human_eval: ({human['proxy']}, {human['victim']}) is no search cell of cdv.cells or "
            "cdv.experiments; set proxy and victim to a searched cell (the paper: gpt-4o-mini)"
        )
    return [(d, human["proxy"], human["victim"]) for d in cdv_datasets()]


stop_on_error(cdv_human_cells)


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
    outputs += [f"results/cdv/dpo/model/{m}/done.json" for m in cdv_dpo_models()]
    if cdv_human_cells():
        outputs += ["results/cdv/human_eval/sheet.csv"]
    if cdv_prompt_inventory_file():
        outputs += ["results/cdv/prompts/inventory.json"]
    return outputs


# The tables cdv_vs_paper compares with the published values (stressprobe.cdv.paper_report.run_values).
CDV_PAPER_TABLES = [
    "cdv_experiments",
    "cdv_classifier_study",
    "cdv_classifier_release",
    "cdv_classifier_transfer",
    "cdv_filter_cost",
    "cdv_baselines",
    "cdv_mitigation",
    "cdv_dpo",
    "cdv_benchmark",
    "cdv_value_ablation",
    "cdv_human_eval",
]


def cdv_table_inputs(name):
    """What the table `name` reads (stressprobe.cdv.study_tables): an input name means the same files in
    every table; cdv_vs_paper reads what each of its tables reads, and the searches."""
    classifier = config["cdv"]["classifier"]
    mitigation = (
        cdv_eval_files("mitigation") if config["cdv"]["mitigation"]["enabled"] else []
    )
    evals = {"evals": cdv_eval_files("eval")}
    inputs = {
        "cdv_search": {"summaries": cdv_cell_files("search.summary.json")},
        "cdv_accuracy": {**evals, "searches": cdv_cell_files("search.jsonl")},
        "cdv_baselines": evals,
        "cdv_mitigation": {**evals, "mitigation": mitigation},
        "cdv_classifier": {"classifier": "results/cdv/classifier/metrics.json"},
        "cdv_value_ablation": {
            "variant_summaries": cdv_variant_files("search.summary.json")
        },
        "cdv_experiments": {
            **evals,
            "questions": expand(CDV_QUESTIONS, dataset=cdv_datasets()),
            "mitigation": mitigation,
        },
        "cdv_classifier_study": {
            "classifier": "results/cdv/classifier/metrics.json",
            "lora": [
                f"results/cdv/classifier/lora/{f}.json" for f in cdv_lora_models()
            ],
        },
        "cdv_filter_cost": {
            "cost_summaries": [
                f"{cdv_cell_dir(*cell)}/search.summary.json"
                for cell in cdv_cost_cells()
            ]
        },
        "cdv_classifier_transfer": {"transfer": "results/cdv/classifier/transfer.json"},
        "cdv_classifier_release": {
            "release": "results/cdv/classifier/release.json",
            "release_lora": [
                f"results/cdv/classifier/release_lora/{f}.json"
                for f in cdv_lora_models()
            ],
        },
        "cdv_dpo": {
            "dpo": [f"results/cdv/dpo/model/{m}/done.json" for m in cdv_dpo_models()],
            "compare": [
                f"results/cdv/benchmark/{CDV_DPO_HELDOUT}/{m}.jsonl"
                for m in cdv_benchmark_models(CDV_DPO_HELDOUT)
                if CDV_DPO_HELDOUT in cdv_benchmark_files()
            ],
        },
        "cdv_benchmark": {"benchmark": cdv_benchmark_records()},
        "cdv_human_eval": {"human": config["cdv"]["human_eval"]["filled"]},
    }
    if name != "cdv_vs_paper":
        return inputs[name]
    merged = {
        "paper_values": config["cdv"]["paper_values"],
        # section 4.3's pairwise agreement on perturbable questions (Figure 4)
        "searches": cdv_cell_files("search.jsonl"),
        # A.2's depth and length shares and section 4.3's wasted share: the searches that label the classifier
        "label_searches": cdv_label_files("search.jsonl"),
    }
    for table in cdv_table_settings(name)["tables"]:
        merged.update(inputs[table])
    return merged


def cdv_table_settings(name):
    """The settings the table `name` is built with: only those it reads, so that a config edit rebuilds
    only the tables it changes."""
    tables = [t for t in cdv_table_names() if t in CDV_PAPER_TABLES]
    experiments = {"experiments": config["cdv"]["experiments"], "seed": config["seed"]}
    if name == "cdv_experiments":
        return experiments
    if name == "cdv_vs_paper":
        return {**experiments, "tables": tables}
    return {}


# Section 4.4's value-function ablation (its cells may be the cost experiment's: cdv_classifier.smk).
def cdv_value_variants():
    return config["cdv"]["value_variants"]


def cdv_value_cells():
    """The search cells the value-function ablation repeats: the study's, or the cost experiment's random
    selections (section 4.4's "randomly selected questions from four datasets")."""
    if not cdv_value_variants():
        return []
    if config["cdv"]["value_variant_cells"] == "study":
        return cdv_cells()
    return [c for c in cdv_cost_cells() if c[0].endswith(".random")]


def _check_value_cells():
    if cdv_value_variants() and not cdv_value_cells():
        raise StressprobeError(
            "config key 'cdv.value_variant_cells': cost_random needs the cost experiment "
            "(cdv.classifier.cost_study.enabled and label cells); enable it or use study"
        )


def cdv_variant_files(name):
    """The ablation's files: each ablated cell's own (the paper's V) and one per value-function variant."""
    return [
        path
        for cell in cdv_value_cells()
        for path in [
            f"{cdv_cell_dir(*cell)}/{name}",
            *(f"{cdv_cell_dir(*cell)}/value/{v}/{name}" for v in cdv_value_variants()),
        ]
    ]


stop_on_error(_check_value_cells)
