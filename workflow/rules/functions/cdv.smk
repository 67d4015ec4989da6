# Input functions, wildcard patterns and output lists of the cdv stage (its rules: ../cdv.smk).

from types import SimpleNamespace

import stressprobe.cdv.answers as _cdv_answers
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
    if cdv_extract_model(victim):
        roles["extract"] = cdv_extract_model(victim)
    return roles


def cdv_extract_model(answering):
    """The model that reads `answering`'s answers by a second call (`cdv.prompts.extract_model`, else
    `answering` itself); None when answers are read from their answer line."""
    return _cdv_answers.extraction_model(config["cdv"]["prompts"], answering)


def cdv_eval_job_models(wildcards):
    """Every model an evaluation job of `{model}` calls: that model and the one that reads its answers."""
    return sorted(
        {wildcards.model, cdv_extract_model(wildcards.model) or wildcards.model}
    )


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


# A model's answers to a dataset's original questions, asked once for every cell (rule cdv_eval_originals;
# kind: eval, or mitigation under the focus instruction).
CDV_ORIGINALS = "results/cdv/{dataset}/originals/{kind}/{model}"


def cdv_originals_input(kind):
    """{"originals": the shared originals that a cell's `kind` evaluation (eval or mitigation) of `{model}`
    reads}, where more than one cell of the dataset evaluates the model; {} where one does (it asks its
    originals itself: a job of their own would only add a job's start and a model load).
    """

    def inputs(w):
        cells = [c for c in cdv_cell_specs() if w.model in cdv_eval_models(c[1], c[0])]
        if len(cells) < 2:
            return {}
        return {
            "originals": CDV_ORIGINALS.format(
                dataset=w.dataset, kind=kind, model=w.model
            )
            + ".jsonl"
        }

    return inputs


def cdv_originals_questions(wildcards):
    """The question files of the dataset's cells that evaluate `{model}`: rule cdv_eval_originals asks their
    union (the samples are nested: the largest one)."""
    return sorted(
        {
            cdv_cell_questions(
                SimpleNamespace(dataset=wildcards.dataset, proxy=p, victim=v)
            )
            for p, v in cdv_cell_specs()
            if wildcards.model in cdv_eval_models(v, p)
        }
    )


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


def cdv_eval_temperature(model):
    """The evaluation temperature of one model: `cdv.eval.temperature` unless its API needs its own."""
    evaluation = config["cdv"]["eval"]
    return evaluation["model_temperature"].get(model, evaluation["temperature"])


def cdv_eval_max_tokens(model):
    """The answer's token limit of one model: `cdv.eval.max_tokens` unless its API counts hidden reasoning
    tokens in it (o1-mini), then `cdv.eval.model_max_tokens`."""
    evaluation = config["cdv"]["eval"]
    return evaluation["model_max_tokens"].get(model, evaluation["max_tokens"])


def cdv_eval_settings(wildcards):
    """How the job's model `{model}` answers (stressprobe.cdv.jobs.EvalSettings, less the prompts): one
    settings object for every rule that evaluates a model."""
    return {
        "max_tokens": cdv_eval_max_tokens(wildcards.model),
        "temperature": cdv_eval_temperature(wildcards.model),
        "prefill": model_prefill(wildcards.model, config["cdv"]["answer_prefix"]),
        "seed": config["seed"],
    }


def cdv_dataset_pattern():
    """A regex of exactly the configured dataset names (so `MMLU.selected` or `n100/MMLU` are not one)."""
    return "|".join(re.escape(d) for d in cdv_datasets()) or "(?!)"


CDV_CELL = cdv_cell_dir("{dataset}", "{proxy}", "{victim}")
# Registry and dataset names have no slash: a cell's search and its value-variant searches (one level
# below it) can never match each other's paths.
CDV_NAME_RE = "[A-Za-z0-9][A-Za-z0-9._-]*"
