# CDV classifier (section 4.3): which questions a search will perturb, trained from searches' labels, the
# LoRA classifiers, and the cost experiment's selection of questions by the trained classifier (Table 3).


include: "functions/cdv_classifier.smk"


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
