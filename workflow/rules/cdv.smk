# Contextual Distraction Vulnerability study: questions per dataset, one tree search per (dataset, proxy,
# victim) cell, evaluation per (cell, model), baselines and mitigation (the classifier, DPO and the tables
# and figures: cdv_classifier.smk, cdv_dpo.smk, cdv_study.smk).


include: "functions/cdv.smk"
include: "functions/cdv_served.smk"


wildcard_constraints:
    variant="gamma0|no_r",


rule cdv_prepare:
    input:
        unpack(cdv_source_inputs),
    output:
        CDV_QUESTIONS,
    log:
        "results/logs/cdv/prepare/{dataset}.log",
    wildcard_constraints:
        dataset=cdv_dataset_pattern(),
    localrule: True
    conda:
        "../../envs/data.yaml"
    resources:
        **config["resources"]["data"],
    params:
        source=cdv_dataset_source,
        seed=config["seed"],
    script:
        "../../scripts/cdv_prepare.py"


rule cdv_subsample:
    input:
        CDV_QUESTIONS,
    output:
        "results/cdv/data/n{n}/{dataset}.jsonl",
    log:
        "results/logs/cdv/subsample/n{n}/{dataset}.log",
    wildcard_constraints:
        dataset=cdv_dataset_pattern(),
        n=r"\d+",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        seed=config["seed"],
    script:
        "../../scripts/cdv_subsample.py"


rule cdv_search:
    input:
        prompt_file=cdv_prompt_file(),
        questions=cdv_cell_questions,
    output:
        search=f"{CDV_CELL}/search.jsonl",
        perturbed=f"{CDV_CELL}/perturbed.jsonl",
        summary=f"{CDV_CELL}/search.summary.json",
        usage=f"{CDV_CELL}/search.usage.json",
    log:
        "results/logs/cdv/search/{dataset}/{proxy}/{victim}.log",
    benchmark:
        "results/benchmarks/cdv/search/{dataset}/{proxy}/{victim}.tsv"
    wildcard_constraints:
        dataset=CDV_NAME_RE,
        proxy=CDV_NAME_RE,
        victim=CDV_NAME_RE,
    conda:
        llm_env(cdv_search_models)
    threads: llm_threads(cdv_search_models)
    resources:
        **llm_resources(cdv_search_models),
    params:
        prompts=cdv_prompts(),
        roles=cdv_search_roles,
        models=lambda w: cdv_models_of(cdv_search_roles(w).values()),
        search=config["cdv"]["search"],
        victim_prefill=lambda w: model_prefill(
            cdv_search_roles(w)["victim"], config["cdv"]["answer_prefix"]
        ),
        # Only the threshold: the classifier's other settings do not change the search.
        classifier_threshold=config["cdv"]["classifier"]["threshold"],
        # The greedy audit asks at the victim's evaluation temperature.
        eval_temperature=lambda w: cdv_eval_temperature(cdv_search_roles(w)["victim"]),
        value="paper",
        seed=config["seed"],
    script:
        "../../scripts/cdv_search.py"


# The value-function ablation (section 4.4): the same search with another value function, beside the
# cell's own (default) search, whose paths stay as they are.
use rule cdv_search as cdv_search_variant with:
    output:
        search=f"{CDV_CELL}/value/{{variant}}/search.jsonl",
        perturbed=f"{CDV_CELL}/value/{{variant}}/perturbed.jsonl",
        summary=f"{CDV_CELL}/value/{{variant}}/search.summary.json",
        usage=f"{CDV_CELL}/value/{{variant}}/search.usage.json",
    log:
        "results/logs/cdv/search/{dataset}/{proxy}/{victim}/value/{variant}.log",
    benchmark:
        "results/benchmarks/cdv/search/{dataset}/{proxy}/{victim}/value/{variant}.tsv"
    params:
        value=lambda w: w.variant,


rule cdv_baselines:
    input:
        prompt_file=cdv_prompt_file(),
        questions=cdv_cell_questions,
    output:
        baselines=f"{CDV_CELL}/baselines.jsonl",
        usage=f"{CDV_CELL}/baselines.usage.json",
    log:
        "results/logs/cdv/baselines/{dataset}/{proxy}/{victim}.log",
    benchmark:
        "results/benchmarks/cdv/baselines/{dataset}/{proxy}/{victim}.tsv"
    conda:
        llm_env(cdv_baseline_models)
    threads: llm_threads(cdv_baseline_models)
    resources:
        **llm_resources(cdv_baseline_models),
    params:
        prompts=cdv_prompts(),
        model=cdv_baseline_model,
        models=lambda w: cdv_models_of([cdv_baseline_model(w)]),
        settings=config["cdv"]["baselines"],
        temperature=config["cdv"]["search"]["proxy_temperature"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_baselines.py"


# One job per (dataset, evaluated model, kind) asks the originals that the dataset's cells share (where
# more than one cell evaluates the model); each cell's cdv_eval / cdv_mitigation picks its questions'
# records from that file. (vLLM evaluators
# grouped per dataset, cdv_served.smk, ask them in their one job per dataset and model.)
rule cdv_eval_originals:
    input:
        questions=cdv_originals_questions,
        prompt_file=cdv_prompt_file(),
    output:
        records=f"{CDV_ORIGINALS}.jsonl",
        usage=f"{CDV_ORIGINALS}.usage.json",
    log:
        "results/logs/cdv/originals/{dataset}/{kind}/{model}.log",
    benchmark:
        "results/benchmarks/cdv/originals/{dataset}/{kind}/{model}.tsv"
    wildcard_constraints:
        dataset=cdv_dataset_pattern(),
        kind="eval|mitigation",
        model=CDV_CELL_EVAL_RE,
    conda:
        llm_env(cdv_eval_job_models)
    threads: llm_threads(cdv_eval_job_models)
    resources:
        **llm_resources(cdv_eval_job_models),
    params:
        prompts=cdv_prompts(),
        models=lambda w: cdv_models_of(cdv_eval_job_models(w)),
        answering=cdv_eval_settings,
        mitigation=lambda w: w.kind == "mitigation",
    script:
        "../../scripts/cdv_eval_originals.py"


rule cdv_eval:
    input:
        unpack(cdv_eval_inputs),
        unpack(cdv_originals_input("eval")),
        prompt_file=cdv_prompt_file(),
    output:
        records=f"{CDV_CELL}/eval/{{model}}.jsonl",
        usage=f"{CDV_CELL}/eval/{{model}}.usage.json",
    log:
        "results/logs/cdv/eval/{dataset}/{proxy}/{victim}/{model}.log",
    benchmark:
        "results/benchmarks/cdv/eval/{dataset}/{proxy}/{victim}/{model}.tsv"
    wildcard_constraints:
        model=CDV_CELL_EVAL_RE,
    conda:
        llm_env(cdv_eval_job_models)
    threads: llm_threads(cdv_eval_job_models)
    resources:
        **llm_resources(cdv_eval_job_models),
    params:
        prompts=cdv_prompts(),
        models=lambda w: cdv_models_of(cdv_eval_job_models(w)),
        answering=cdv_eval_settings,
        mitigation=False,
    script:
        "../../scripts/cdv_eval.py"


# The focus instruction (Table 4): cdv_eval on the cell's originals and perturbed questions, with only its
# own inputs, outputs and mitigation switch.
use rule cdv_eval as cdv_mitigation with:
    input:
        unpack(cdv_originals_input("mitigation")),
        prompt_file=cdv_prompt_file(),
        questions=cdv_cell_questions,
        perturbed=f"{CDV_CELL}/perturbed.jsonl",
    output:
        records=f"{CDV_CELL}/mitigation/{{model}}.jsonl",
        usage=f"{CDV_CELL}/mitigation/{{model}}.usage.json",
    log:
        "results/logs/cdv/mitigation/{dataset}/{proxy}/{victim}/{model}.log",
    benchmark:
        "results/benchmarks/cdv/mitigation/{dataset}/{proxy}/{victim}/{model}.tsv"
    params:
        mitigation=True,
