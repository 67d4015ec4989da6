# The CDV jobs that answer every cell of a dataset with one model load: a vLLM evaluator's grouped
# evaluation (cdv_eval_vllm) and, for vLLM models that also search, the served dataset job
# (cdv_vllm_served), which runs their searches and evaluations behind one vLLM server each.


rule cdv_eval_vllm:
    input:
        unpack(cdv_eval_group_inputs),
        prompt_file=cdv_prompt_file(),
    output:
        records=cdv_group_outputs("eval", ".jsonl"),
        usage=cdv_group_outputs("eval", ".usage.json"),
        mitigation=cdv_group_outputs("mitigation", ".jsonl"),
        mitigation_usage=cdv_group_outputs("mitigation", ".usage.json"),
    log:
        "results/logs/cdv/eval/{dataset}/{model}.log",
    benchmark:
        "results/benchmarks/cdv/eval/{dataset}/{model}.tsv"
    wildcard_constraints:
        model=CDV_VLLM_EVAL_RE,
    conda:
        llm_env(cell_model)
    threads: llm_threads(cell_model)
    resources:
        **llm_resources(cell_model),
    params:
        prompts=cdv_prompts(),
        models=lambda w: cdv_models_of(cdv_eval_job_models(w)),
        cells=cdv_group_cells(),
        answering=cdv_eval_settings,
    script:
        "../../scripts/cdv_eval_group.py"


# One load per (dataset, model) also for the vLLM models that both search and evaluate: rule
# cdv_vllm_served serves them side by side (one vLLM server each, on its own GPUs) for the searches of the
# cells they take part in, then their evaluations on every cell; the same per-cell files as cdv_search and
# cdv_eval_vllm write. Without such models (or with `cdv.eval.vllm_served: false`) the rule does not exist.
if cdv_served_models():

    ruleorder: cdv_vllm_served > cdv_search

    rule cdv_vllm_served:
        input:
            unpack(cdv_served_inputs),
            prompt_file=cdv_prompt_file(),
        output:
            search=cdv_served_search_outputs("search.jsonl"),
            perturbed=cdv_served_search_outputs("perturbed.jsonl"),
            summary=cdv_served_search_outputs("search.summary.json"),
            search_usage=cdv_served_search_outputs("search.usage.json"),
            records=cdv_served_eval_outputs("eval", ".jsonl"),
            usage=cdv_served_eval_outputs("eval", ".usage.json"),
            mitigation=cdv_served_eval_outputs("mitigation", ".jsonl"),
            mitigation_usage=cdv_served_eval_outputs("mitigation", ".usage.json"),
        log:
            "results/logs/cdv/served/{dataset}.log",
        benchmark:
            "results/benchmarks/cdv/served/{dataset}.tsv"
        wildcard_constraints:
            dataset=cdv_dataset_pattern(),
        conda:
            llm_env(cdv_served_job_models)
        threads: llm_threads(cdv_served_job_models)
        resources:
            **llm_resources(lambda w: cdv_served_models(), gpus=sum),
        params:
            prompts=cdv_prompts(),
            models=cdv_models_of(cdv_served_job_models()),
            served=cdv_served_models(),
            cells=cdv_group_cells(),
            searches=cdv_served_plan()["searches"],
            evals=cdv_served_plan()["evals"],
            search=config["cdv"]["search"],
            classifier_threshold=config["cdv"]["classifier"]["threshold"],
            seed=config["seed"],
        script:
            "../../scripts/cdv_vllm_served.py"
