# Input functions, wildcard patterns and output lists of the cost stage (its rules: ../cost.smk).


def cost_judging_datasets():
    return judging_datasets() if judging_enabled() else []


def cost_persona_sources():
    """Persona sources whose retrieved roles are judged (their selection tables enter the estimate)."""
    sources = {condition.split("/")[0] for condition in judging_conditions()}
    return sorted(source for source in sources if _judging.is_retrieved(source))


def preflight_pools():
    """The persona pools the run reads (for the preflight's pin check): those whose roles are judged."""
    return {source: persona_source(source) for source in cost_persona_sources()}


def cost_inputs(wildcards):
    """What the estimate reads: each dataset's pairs, topics and persona tables, and the prompt templates.

    Not the summaries: building them costs money, so the estimate reads them only if a run wrote them.
    """
    inputs = {
        "judge_template": judge_template(),
        "summary_template": summary_template(),
    }
    for dataset in cost_judging_datasets():
        inputs[f"{dataset}_pairs"] = f"results/data/{dataset}/pairs.jsonl"
        inputs[f"{dataset}_topics"] = TOPICS.format(dataset=dataset)
        for source in cost_persona_sources():
            table = f"results/judging/{dataset}/personas/{source}.jsonl"
            inputs[f"{dataset}_{source}"] = table
    for dataset in cost_cdv_datasets():
        inputs[f"cdv_{dataset}"] = CDV_QUESTIONS.format(dataset=dataset)
    if cost_cdv_datasets() and cdv_prompt_file():
        inputs["cdv_prompt_file"] = cdv_prompt_file()[0]
    for name in cost_cdv_benchmarks():
        if name != CDV_DPO_HELDOUT:  # the held-out split is bounded from the searches
            inputs[f"cdv_benchmark_{name}"] = cdv_benchmark_files()[name]
    return inputs


def cost_cdv_benchmarks():
    """Benchmark name -> the models rule cdv_benchmark evaluates on it (the DPO comparison rows too)."""
    if not cost_cdv_datasets():
        return {}
    return {name: cdv_benchmark_models(name) for name in sorted(cdv_benchmark_files())}


def cost_cdv_datasets():
    enabled = cdv_enabled() and cdv_cell_specs()
    return cdv_datasets() if enabled else []


def cost_cdv_cells():
    """Each CDV search cell with its role models and evaluated models."""
    datasets = cost_cdv_datasets()
    return [
        {
            "dataset": dataset,
            "roles": cell_roles(proxy, victim),
            "eval_models": cdv_eval_models(victim, proxy),
            # The cell's nested subsample of the dataset's questions (n, seed).
            "n": cdv_cell_n(proxy, victim),
            "seed": config["seed"],
        }
        for dataset, proxy, victim in cdv_cells()
        if dataset in datasets
    ]
