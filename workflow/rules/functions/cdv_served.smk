# Input functions and wildcard patterns of the jobs that answer a dataset's cells with one model load (their
# rules: ../cdv_served.smk): grouped vLLM evaluations and the served dataset job.

from types import SimpleNamespace


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


def cdv_served_cells():
    """(proxy, victim) of the search cells that the served dataset job (cdv_vllm_served) runs, those whose
    vLLM roles are all served models (none when `cdv.eval.vllm_served` is off)."""
    served = set(cdv_served_models())
    cells = []
    for proxy, victim in cdv_group_cells():
        gpu_roles = {m for m in cell_roles(proxy, victim).values() if is_vllm(m)}
        if gpu_roles and gpu_roles <= served:
            cells.append((proxy, victim))
    return cells


def _served_cell_roles():
    """Every model with a role in a search cell of the served dataset job."""
    return {m for p, v in cdv_served_cells() for m in cell_roles(p, v).values()}


def _served_candidates():
    """Grouped evaluators that take a role in a search cell whose vLLM roles are all grouped evaluators."""
    grouped = set(cdv_grouped_eval_models())
    roles = set()
    for proxy, victim in cdv_group_cells():
        gpu_roles = {m for m in cell_roles(proxy, victim).values() if is_vllm(m)}
        if gpu_roles and gpu_roles <= grouped:
            roles |= gpu_roles
    return [m for m in cdv_grouped_eval_models() if m in roles]


def cdv_served_models():
    """The dataset job's co-resident vLLM models: grouped evaluators that take a role in one of its search
    cells. Each is served once per dataset, for its searches and its evaluation (a cycle for jobs that load
    one model each: the evaluation of one needs the other's search). They share one node, so their `gpus`
    add up to at most `cdv.eval.vllm_served_gpus`: the largest are taken first (their second load costs the
    most), in `eval_models` order among equals; the others search and evaluate in jobs of their own.
    """
    if not config["cdv"]["eval"]["vllm_served"]:
        return []
    budget, chosen = config["cdv"]["eval"]["vllm_served_gpus"], set()
    candidates = _served_candidates()
    for m in sorted(candidates, key=lambda m: -model_resources(m)):
        if model_resources(m) <= budget:
            chosen.add(m)
            budget -= model_resources(m)
    return [m for m in candidates if m in chosen]


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
            "max_tokens": cdv_eval_max_tokens(model),
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
