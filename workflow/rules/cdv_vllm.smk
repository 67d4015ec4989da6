# One vLLM model load per (dataset, model) for CDV evaluation: a vLLM model in `cdv.eval_models` is
# evaluated on every search cell of a dataset (and, with mitigation on, under the focus instruction) by one
# job, rule cdv_eval_vllm, which writes the same per-cell files as cdv_eval and cdv_mitigation. Input
# functions live in common.smk under "# ---- cdv ----".


rule cdv_eval_vllm:
    input:
        unpack(cdv_eval_group_inputs),
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
        lambda w: cdv_env([w.model])
    threads: lambda w: cdv_threads([w.model])
    resources:
        gpu=lambda w: model_resources(w.model),
        mem_mb=lambda w: llm_resources(w.model)["mem_mb"],
        runtime=lambda w: llm_resources(w.model)["runtime"],
    params:
        models=lambda w: cdv_models_of([w.model]),
        cells=cdv_group_cells(),
        max_tokens=config["cdv"]["eval"]["max_tokens"],
        temperature=lambda w: cdv_eval_temperature(w.model),
        prefill=lambda w: model_prefill(w.model, config["cdv"]["answer_prefix"]),
        seed=config["seed"],
    script:
        "../../scripts/cdv_eval_group.py"
