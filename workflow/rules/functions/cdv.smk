# Input functions, wildcard patterns and output lists of the cdv stage (its rules: ../cdv.smk).

import stressprobe.cdv.experiments as _cdv_experiments

# A CDV dataset's sampled questions, read by every CDV stage: the one place its path is written.
CDV_QUESTIONS = "results/cdv/data/{dataset}.jsonl"


def cdv_datasets():
    return list(config["cdv"]["datasets"])


def cdv_question_file(dataset):
    """A dataset's question file: its local path or pinned source (`source:<name>`); None for Hugging Face."""
    path = config["cdv"]["datasets"][dataset]["path"]
    return source_file(path, f"cdv.datasets.{dataset}.path") if path else None


def cdv_source_inputs(wildcards):
    """A question file is an input, so that editing it (or fetching its source) prepares the dataset again."""
    path = cdv_question_file(wildcards.dataset)
    return {"questions": path} if path else {}


def cdv_dataset_source(wildcards):
    """The dataset's config entry with its question file resolved (the job reads that file)."""
    source = config["cdv"]["datasets"][wildcards.dataset]
    return {**source, "path": cdv_question_file(wildcards.dataset)}


def cdv_prompt_file():
    """The CDV prompts' template file (`cdv.prompts.file`: a path or a pinned source) as an input of every job
    that asks with it; none for the project's own prompts."""
    spec = config["cdv"]["prompts"]["file"]
    return [source_file(spec, "cdv.prompts.file")] if spec else []


def cdv_prompt_inventory_file():
    """The file whose templates rule cdv_prompt_inventory lists (`cdv.prompts.inventory_of`), or none."""
    spec = config["cdv"]["prompts"]["inventory_of"]
    return [source_file(spec, "cdv.prompts.inventory_of")] if spec else []


def cdv_prompts():
    """`cdv.prompts` as a job's params, its template file resolved (the job reads the templates by name)."""
    prompts = {k: v for k, v in config["cdv"]["prompts"].items() if k != "inventory_of"}
    return {**prompts, "file": next(iter(cdv_prompt_file()), None)}


def cdv_cell_specs():
    """(proxy, victim) -> n, eval_models and experiments, from `cdv.cells` and `cdv.experiments`."""
    return _cdv_experiments.cell_specs(config["cdv"])


def cdv_cells():
    """(dataset, proxy, victim) of every search cell of the study (not the cost experiment's)."""
    return [(d, p, v) for d in cdv_datasets() for p, v in cdv_cell_specs()]


def cdv_cell_n(proxy, victim):
    """Questions per dataset searched in a cell (None = the dataset's whole sample)."""
    spec = cdv_cell_specs().get((proxy, victim))
    return spec["n"] if spec else None


def cdv_cell_questions(wildcards):
    """A cell's questions: the dataset's sample, its nested subsample of the cell's n, or (for the cost
    experiment's `<dataset>.selected` / `.random` datasets) the selection."""
    n = cdv_cell_n(wildcards.proxy, wildcards.victim)
    if wildcards.dataset in cdv_datasets() and n is not None:
        return f"results/cdv/data/n{n}/{wildcards.dataset}.jsonl"
    return CDV_QUESTIONS.format(dataset=wildcards.dataset)


def cdv_cell_dir(dataset, proxy, victim):
    return f"results/cdv/{dataset}/{proxy}/{victim}"


def cdv_eval_models(victim, proxy=None):
    """Models evaluated on a cell: its experiments' (else `cdv.eval_models`, else the cell's victim)."""
    spec = cdv_cell_specs().get((proxy, victim)) if proxy else None
    if spec:
        return spec["eval_models"]
    return config["cdv"]["eval_models"] or [victim]


def cell_roles(proxy, victim):
    """role -> model name of a cell's search job (the classifier only when it filters inside the search)."""
    roles = {
        "proxy": proxy,
        "victim": victim,
        "semantic": config["cdv"]["semantic_model"] or victim,
    }
    classifier = config["cdv"]["classifier"]
    if classifier["kind"] == "prompt" and classifier["filter_search"]:
        roles["classifier"] = classifier["model"] or victim
    return roles


def cdv_search_models(wildcards):
    return list(cdv_search_roles(wildcards).values())


def cdv_baseline_models(wildcards):
    return [cdv_baseline_model(wildcards)]


def cdv_search_roles(wildcards):
    return cell_roles(wildcards.proxy, wildcards.victim)


def cdv_models_of(names):
    """The registry entries of `names` (as params: editing another model reruns nothing here)."""
    return {name: model_entry(name) for name in sorted(set(names))}


def cdv_baseline_model(wildcards):
    return config["cdv"]["baseline_model"] or wildcards.proxy


def cdv_eval_inputs(wildcards):
    cell = cdv_cell_dir(wildcards.dataset, wildcards.proxy, wildcards.victim)
    inputs = {
        "questions": cdv_cell_questions(wildcards),
        "perturbed": f"{cell}/perturbed.jsonl",
    }
    if config["cdv"]["baselines"]["enabled"]:
        inputs["baselines"] = f"{cell}/baselines.jsonl"
    return inputs


def cdv_cell_files(name):
    """`name` (e.g. search.jsonl) in every cell directory."""
    return [f"{cdv_cell_dir(*cell)}/{name}" for cell in cdv_cells()]


def cdv_eval_files(kind="eval"):
    """Every `{kind}/{model}.jsonl` of every cell (kind: eval or mitigation)."""
    return [
        f"{cdv_cell_dir(d, p, v)}/{kind}/{model}.jsonl"
        for d, p, v in cdv_cells()
        for model in cdv_eval_models(v, p)
    ]


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


def cdv_classifier_roles():
    """Models of the post-hoc classifier job: the prompt classifier's model per victim, and the study's
    prompt-based classifiers."""
    classifier = config["cdv"]["classifier"]
    names = set(classifier["prompt_models"])
    if classifier["kind"] == "prompt":
        names |= {classifier["model"] or v for _, _, v in cdv_label_cells()}
    return sorted(names)


def cdv_classifier_models(wildcards):
    return cdv_classifier_roles()


def cdv_classifier_resources():
    """The classifier embeds questions and asks its prompt models, one after another: a GPU job sized for the
    largest when one of them runs on vllm, an embedding job otherwise."""
    if any(map(is_vllm, cdv_classifier_roles())):
        return llm_resources(cdv_classifier_models)
    return config["resources"]["embedding"]


def cdv_label_cells():
    """(dataset, proxy, victim) of the cells whose searches label the classifier's questions."""
    chosen = {
        (c["proxy"], c["victim"]) for c in config["cdv"]["classifier"]["label_cells"]
    }
    return [cell for cell in cdv_cells() if not chosen or cell[1:] in chosen]


def cdv_label_files(name):
    return [f"{cdv_cell_dir(*cell)}/{name}" for cell in cdv_label_cells()]


def cdv_cost_study():
    """The cost experiment's settings with its proxy and victim resolved; None when it is off."""
    study = dict(config["cdv"]["classifier"]["cost_study"])
    if not study["enabled"] or not cdv_label_cells():
        return None
    _, proxy, victim = cdv_label_cells()[0]
    study["proxy"] = study["proxy"] or proxy
    study["victim"] = study["victim"] or victim
    return study


def cdv_cost_cells():
    """(dataset, proxy, victim) of the cost experiment's searches (datasets `<name>.<selection>`)."""
    study = cdv_cost_study()
    if study is None:
        return []
    return [
        (_cdv_experiments.selection_dataset(d, s), study["proxy"], study["victim"])
        for d in cdv_datasets()
        for s in _cdv_experiments.SELECTIONS
    ]


def cdv_dataset_pattern():
    """A regex of exactly the configured dataset names (so `MMLU.selected` or `n100/MMLU` are not one)."""
    return "|".join(re.escape(d) for d in cdv_datasets()) or "(?!)"


def cdv_experiment_samples():
    """Experiment name -> n, for the tables that keep an experiment's own sample."""
    return {name: e["n"] for name, e in sorted(config["cdv"]["experiments"].items())}


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
    if cdv_prompt_inventory_file():
        outputs += ["results/cdv/prompts/inventory.json"]
    return outputs


def cdv_cell_prices():
    """Price of every model that some cell's search runs under some role (the classifier job's cost
    columns): as a param, editing an unrelated model's price reruns nothing."""
    cells = cdv_cells() + cdv_cost_cells()
    names = {name for _, p, v in cells for name in cell_roles(p, v).values()}
    return {name: config["models"][name].get("price", {}) for name in sorted(names)}


CDV_STUDY_TABLES = [
    "cdv_experiments",
    "cdv_classifier_study",
    "cdv_filter_cost",
    "cdv_dpo",
    "cdv_vs_paper",
]


def cdv_lora_models():
    """File name -> Hugging Face id of the LoRA classifiers (none unless `classifier.lora.enabled`)."""
    lora = config["cdv"]["classifier"]["lora"]
    if not lora["enabled"]:
        return {}
    return {_cdv_experiments.file_name(model): model for model in lora["base_models"]}


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


CDV_CELL = cdv_cell_dir("{dataset}", "{proxy}", "{victim}")
# Registry and dataset names have no slash: a cell's search and its value-variant searches (one level
# below it) can never match each other's paths.
CDV_NAME_RE = "[A-Za-z0-9][A-Za-z0-9._-]*"


stop_on_error(_check_value_cells)
