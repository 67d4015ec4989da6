# Input functions, wildcard patterns and output lists of the cdv stage (its rules: ../cdv.smk).

from types import SimpleNamespace

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


def cdv_grouped_eval_models():
    """vLLM models of `cdv.eval_models` evaluated on all cells of a dataset in one job (rule cdv_eval_vllm).

    Only with an explicit `eval_models` list: without one, each cell evaluates its own victim, which a
    single job per (dataset, victim) does already.
    """
    if not config["cdv"]["eval"]["vllm_one_job_per_dataset"]:
        return []
    return [
        m
        for m in config["cdv"]["eval_models"]
        if is_vllm(m) and all(m in cdv_eval_models(v, p) for p, v in cdv_cell_specs())
    ]


def cdv_group_cells():
    """(proxy, victim) of every search cell, in a fixed order: a grouped vLLM evaluation covers them all."""
    return sorted(cdv_cell_specs())


def cdv_group_outputs(kind, suffix):
    """`{kind}/{model}{suffix}` of every search cell of a dataset (wildcards kept); none for mitigation when
    it is off."""
    if kind == "mitigation" and not config["cdv"]["mitigation"]["enabled"]:
        return []
    return [
        f"results/cdv/{{dataset}}/{proxy}/{victim}/{kind}/{{model}}{suffix}"
        for proxy, victim in cdv_group_cells()
    ]


def cdv_eval_group_inputs(wildcards):
    """Every cell's questions (its experiment's sample) and perturbed questions (and baselines when enabled)."""
    inputs = {}
    for i, (proxy, victim) in enumerate(cdv_group_cells()):
        cell = cdv_cell_dir(wildcards.dataset, proxy, victim)
        spec = SimpleNamespace(dataset=wildcards.dataset, proxy=proxy, victim=victim)
        inputs[f"questions_{i}"] = cdv_cell_questions(spec)
        inputs[f"perturbed_{i}"] = f"{cell}/perturbed.jsonl"
        if config["cdv"]["baselines"]["enabled"]:
            inputs[f"baselines_{i}"] = f"{cell}/baselines.jsonl"
    return inputs


def cdv_eval_temperature(model):
    """The evaluation temperature of one model: `cdv.eval.temperature` unless its API needs its own."""
    evaluation = config["cdv"]["eval"]
    return evaluation["model_temperature"].get(model, evaluation["temperature"])


def cdv_served_cells():
    """(proxy, victim) of the search cells that the served dataset job (cdv_vllm_served) runs, those whose
    vLLM roles are all grouped evaluators (none when `cdv.eval.vllm_served` is off)."""
    if not config["cdv"]["eval"]["vllm_served"]:
        return []
    grouped = set(cdv_grouped_eval_models())
    served = []
    for proxy, victim in cdv_group_cells():
        gpu_roles = {m for m in cell_roles(proxy, victim).values() if is_vllm(m)}
        if gpu_roles and gpu_roles <= grouped:
            served.append((proxy, victim))
    return served


def _served_cell_roles():
    """Every model with a role in a search cell of the served dataset job."""
    return {m for p, v in cdv_served_cells() for m in cell_roles(p, v).values()}


def cdv_served_models():
    """The dataset job's co-resident vLLM models: grouped evaluators that take a role in one of its search
    cells. Each is served once per dataset, for its searches and its evaluation (a cycle for jobs that load
    one model each: the evaluation of one needs the other's search)."""
    roles = _served_cell_roles()
    return [m for m in cdv_grouped_eval_models() if m in roles]


def cdv_served_plan():
    """The served job's work as params: its search cells (roles and per-cell settings) and evaluations."""
    searches = [
        {
            "cell": [proxy, victim],
            "roles": cell_roles(proxy, victim),
            "victim_prefill": model_prefill(victim, config["cdv"]["answer_prefix"]),
            "eval_temperature": cdv_eval_temperature(victim),
        }
        for proxy, victim in cdv_served_cells()
    ]
    evals = [
        {
            "model": model,
            "temperature": cdv_eval_temperature(model),
            "prefill": model_prefill(model, config["cdv"]["answer_prefix"]),
        }
        for model in cdv_served_models()
    ]
    return {"searches": searches, "evals": evals}


def cdv_served_job_models(wildcards=None):
    """Every model the served job calls: its searches' roles (the served models among them)."""
    return sorted(_served_cell_roles())


def cdv_served_search_outputs(name):
    """`name` (e.g. search.jsonl) of every cell the served job searches, dataset wildcard kept."""
    return [f"results/cdv/{{dataset}}/{p}/{v}/{name}" for p, v in cdv_served_cells()]


def cdv_served_eval_outputs(kind, suffix):
    """`{kind}/{model}{suffix}` of every search cell for every served model, model-major (the order the
    script reads them in); none for mitigation when it is off."""
    if kind == "mitigation" and not config["cdv"]["mitigation"]["enabled"]:
        return []
    return [
        f"results/cdv/{{dataset}}/{p}/{v}/{kind}/{model}{suffix}"
        for model in cdv_served_models()
        for p, v in cdv_group_cells()
    ]


def cdv_served_inputs(wildcards):
    """The grouped evaluation's inputs, less the perturbed questions of the cells the job searches itself."""
    inputs = cdv_eval_group_inputs(wildcards)
    for i, cell in enumerate(cdv_group_cells()):
        if cell in cdv_served_cells():
            del inputs[f"perturbed_{i}"]
    return inputs


# cdv_eval_vllm: the grouped evaluators the served job does not cover.
CDV_VLLM_EVAL_RE = _alternation(
    [m for m in cdv_grouped_eval_models() if m not in cdv_served_models()]
)
# cdv_eval and cdv_mitigation: every evaluated model except the grouped ones.
CDV_CELL_EVAL_RE = _alternation(
    sorted(
        {m for _, p, v in cdv_cells() for m in cdv_eval_models(v, p)}
        - set(cdv_grouped_eval_models())
    )
)


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
