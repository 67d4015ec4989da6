# Contextual Distraction Vulnerability study: questions per dataset, one tree search per (dataset, proxy,
# victim) cell, evaluation per (cell, model), baselines, mitigation, classifier, DPO pairs, tables, figures.


include: "functions/cdv.smk"
include: "functions/cdv_served.smk"


wildcard_constraints:
    cdv_table="cdv_[a-z_]+",
    cdv_figure="cdv_[a-z_]+",
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


rule cdv_filter_select:
    input:
        pool="results/cdv/classifier/pool.jsonl",
        questions=CDV_QUESTIONS,
    output:
        selected="results/cdv/data/{dataset}.selected.jsonl",
        random="results/cdv/data/{dataset}.random.jsonl",
    log:
        "results/logs/cdv/filter_select/{dataset}.log",
    wildcard_constraints:
        dataset=cdv_dataset_pattern(),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        study=cdv_cost_study(),
        threshold=config["cdv"]["classifier"]["threshold"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_filter_select.py"


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
        prompts=cdv_prompts(),
        roles=cdv_search_roles,
        models=lambda w: cdv_models_of(cdv_search_roles(w).values()),
        search=config["cdv"]["search"],
        victim_prefill=lambda w: model_prefill(
            cdv_search_roles(w)["victim"], config["cdv"]["answer_prefix"]
        ),
        classifier_threshold=config["cdv"]["classifier"]["threshold"],
        eval_temperature=lambda w: cdv_eval_temperature(cdv_search_roles(w)["victim"]),
        value=lambda w: w.variant,
        seed=config["seed"],


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


rule cdv_eval:
    input:
        unpack(cdv_eval_inputs),
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
        llm_env(cell_model)
    threads: llm_threads(cell_model)
    resources:
        **llm_resources(cell_model),
    params:
        prompts=cdv_prompts(),
        models=lambda w: cdv_models_of([w.model]),
        max_tokens=config["cdv"]["eval"]["max_tokens"],
        temperature=lambda w: cdv_eval_temperature(w.model),
        prefill=lambda w: model_prefill(w.model, config["cdv"]["answer_prefix"]),
        mitigation=False,
        seed=config["seed"],
    script:
        "../../scripts/cdv_eval.py"


rule cdv_mitigation:
    input:
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
    wildcard_constraints:
        model=CDV_CELL_EVAL_RE,
    conda:
        llm_env(cell_model)
    threads: llm_threads(cell_model)
    resources:
        **llm_resources(cell_model),
    params:
        prompts=cdv_prompts(),
        models=lambda w: cdv_models_of([w.model]),
        max_tokens=config["cdv"]["eval"]["max_tokens"],
        temperature=lambda w: cdv_eval_temperature(w.model),
        prefill=lambda w: model_prefill(w.model, config["cdv"]["answer_prefix"]),
        mitigation=True,
        seed=config["seed"],
    script:
        "../../scripts/cdv_eval.py"


rule cdv_classifier:
    input:
        searches=cdv_label_files("search.jsonl"),
        # Each cell's roles -> model names, to price the cost columns by the models that actually ran.
        summaries=cdv_label_files("search.summary.json"),
        questions=expand(CDV_QUESTIONS, dataset=cdv_datasets()),
    output:
        predictions="results/cdv/classifier/predictions.jsonl",
        metrics="results/cdv/classifier/metrics.json",
        # Unlabelled questions scored by the trained classifier: the cost experiment's pool.
        pool="results/cdv/classifier/pool.jsonl",
    log:
        "results/logs/cdv/classifier.log",
    benchmark:
        "results/benchmarks/cdv/classifier.tsv"
    conda:
        llm_env(cdv_classifier_models)
    threads: llm_threads(cdv_classifier_models)
    resources:
        **cdv_classifier_resources(),
    params:
        classifier=config["cdv"]["classifier"],
        models=cdv_models_of(cdv_classifier_roles()),
        embedding=config["embedding"],
        prices=cdv_cell_prices(),
        seed=config["seed"],
    script:
        "../../scripts/cdv_classifier.py"


rule cdv_dpo_export:
    input:
        perturbed=cdv_cell_files("perturbed.jsonl"),
        searches=cdv_cell_files("search.jsonl"),
        evals=cdv_eval_files("eval"),
    output:
        train="results/cdv/dpo/train.jsonl",
        validation="results/cdv/dpo/validation.jsonl",
        test="results/cdv/dpo/test.jsonl",
        heldout="results/cdv/dpo/heldout.jsonl",
    log:
        "results/logs/cdv/dpo_export.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        test_fraction=config["cdv"]["dpo"]["test_fraction"],
        validation_fraction=config["cdv"]["dpo"]["validation_fraction"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_dpo_export.py"


rule cdv_dpo_train:
    input:
        train="results/cdv/dpo/train.jsonl",
        validation="results/cdv/dpo/validation.jsonl",
        heldout="results/cdv/dpo/heldout.jsonl",
    output:
        done="results/cdv/dpo/model/done.json",
    log:
        "results/logs/cdv/dpo_train.log",
    benchmark:
        "results/benchmarks/cdv/dpo_train.tsv"
    conda:
        "../../envs/dpo.yaml"
    resources:
        gpu=1,
        mem_mb=32000,
        runtime=720,
    params:
        settings=config["cdv"]["dpo"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_dpo_train.py"


rule cdv_table:
    input:
        summaries=cdv_cell_files("search.summary.json"),
        variant_summaries=cdv_variant_files("search.summary.json"),
        searches=cdv_cell_files("search.jsonl"),
        evals=cdv_eval_files("eval"),
        mitigation=(
            cdv_eval_files("mitigation")
            if config["cdv"]["mitigation"]["enabled"]
            else []
        ),
        classifier=(
            "results/cdv/classifier/metrics.json"
            if config["cdv"]["classifier"]["kind"] != "none"
            else []
        ),
    output:
        **table_outputs("{cdv_table}", "cdv", "CDV study", "Tables"),
    log:
        "results/logs/cdv/tables/{cdv_table}.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    script:
        "../../scripts/cdv_table.py"


rule cdv_figure:
    input:
        searches=cdv_cell_files("search.jsonl"),
        evals=cdv_eval_files("eval"),
    output:
        **figure_outputs("{cdv_figure}", "cdv", "CDV study", "Figures"),
    log:
        "results/logs/cdv/figures/{cdv_figure}.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        figure=analysis_figure_options(),
    script:
        "../../scripts/cdv_figure.py"


# The paper's experiment tables (stressprobe.cdv.paper_report); the names are also cdv_table's pattern.
ruleorder: cdv_study_table > cdv_table


rule cdv_study_table:
    input:
        unpack(lambda w: cdv_study_inputs(w.cdv_study_table)),
    output:
        **table_outputs("{cdv_study_table}", "cdv", "CDV study", "Tables"),
    log:
        "results/logs/cdv/tables/{cdv_study_table}.log",
    wildcard_constraints:
        cdv_study_table="|".join(CDV_STUDY_TABLES),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        experiments=config["cdv"]["experiments"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_study_table.py"


rule cdv_classifier_lora:
    input:
        predictions="results/cdv/classifier/predictions.jsonl",
        questions=expand(CDV_QUESTIONS, dataset=cdv_datasets()),
    output:
        "results/cdv/classifier/lora/{lora}.json",
    log:
        "results/logs/cdv/classifier_lora/{lora}.log",
    benchmark:
        "results/benchmarks/cdv/classifier_lora/{lora}.tsv"
    conda:
        "../../envs/dpo.yaml"
    resources:
        gpu=1,
        mem_mb=64000,
        runtime=720,
    params:
        base_model=lambda w: cdv_lora_models()[w.lora],
        settings=config["cdv"]["classifier"]["lora"],
        threshold=config["cdv"]["classifier"]["threshold"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_classifier_lora.py"


ruleorder: cdv_study_figure > cdv_figure


rule cdv_study_figure:
    input:
        table="results/tables/{cdv_study_figure}.csv",
    output:
        **figure_outputs("{cdv_study_figure}", "cdv", "CDV study", "Figures"),
    log:
        "results/logs/cdv/figures/{cdv_study_figure}.log",
    wildcard_constraints:
        cdv_study_figure="cdv_experiments|cdv_classifier_study",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        figure=analysis_figure_options(),
    script:
        "../../scripts/cdv_study_figure.py"


# One vLLM model load per (dataset, model) for CDV evaluation: a vLLM model in `cdv.eval_models` is
# evaluated on every search cell of a dataset (and, with mitigation on, under the focus instruction) by one
# job, rule cdv_eval_vllm, which writes the same per-cell files as cdv_eval and cdv_mitigation.


include: "cdv_served.smk"
include: "cdv_prompts.smk"
