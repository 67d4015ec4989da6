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
        # The questions the classifier did not train on, scored by it: the cost experiment's pool.
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
        embedding=embedding_settings(),
        prices=cdv_cell_prices(),
        seed=config["seed"],
    script:
        "../../scripts/cdv_classifier.py"


rule cdv_classifier_lora:
    input:
        predictions="results/cdv/classifier/predictions.jsonl",
        # The questions no classifier trained on, scored too: the cost experiment's selection when this one filters.
        pool="results/cdv/classifier/pool.jsonl",
        questions=expand(CDV_QUESTIONS, dataset=cdv_datasets()),
    output:
        scores="results/cdv/classifier/lora/{lora}.json",
        pool="results/cdv/classifier/lora/{lora}.pool.jsonl",
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
        pool=lambda w: cdv_selection_pool(w.selection),
        questions=CDV_QUESTIONS,
    output:
        "results/cdv/data/{dataset}.{selection}.jsonl",
    log:
        "results/logs/cdv/filter_select/{dataset}.{selection}.log",
    wildcard_constraints:
        dataset=cdv_dataset_pattern(),
        selection=_alternation(cdv_cost_selections()),
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        study=cdv_cost_study(),
        # A selection other than `random` keeps what its pool's classifier keeps.
        draw=lambda w: "random" if w.selection == "random" else "selected",
        threshold=config["cdv"]["classifier"]["threshold"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_filter_select.py"


# Table 2: the filtering classifier's effect on other victims' self-search cells.
rule cdv_classifier_transfer:
    input:
        scores=cdv_filter_scores(),
        # the classifier's splits (the LoRA classifiers train on the same ones)
        labels="results/cdv/classifier/predictions.jsonl",
        searches=[f"{cdv_cell_dir(*c)}/search.jsonl" for c in cdv_table2_cells()],
    output:
        "results/cdv/classifier/transfer.json",
    log:
        "results/logs/cdv/classifier_transfer.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        threshold=config["cdv"]["classifier"]["threshold"],
        questions=config["cdv"]["classifier"]["table2"]["questions"],
    script:
        "../../scripts/cdv_classifier_transfer.py"


# Table 7 from the authors' released labels instead of new searches.
rule cdv_classifier_release:
    input:
        **cdv_release_labels(),
    output:
        "results/cdv/classifier/release.json",
    log:
        "results/logs/cdv/classifier_release.log",
    benchmark:
        "results/benchmarks/cdv/classifier_release.tsv"
    conda:
        # the classifier job's environment: it embeds, and asks the prompt classifiers
        llm_env(cdv_release_prompt_models)
    threads: llm_threads(cdv_release_prompt_models)
    resources:
        **cdv_classifier_resources(),
    params:
        embedding=embedding_settings(),
        threshold=config["cdv"]["classifier"]["threshold"],
        prompt_models=config["cdv"]["classifier"]["prompt_models"],
        models=cdv_models_of(config["cdv"]["classifier"]["prompt_models"]),
        seed=config["seed"],
    script:
        "../../scripts/cdv_classifier_release.py"


# The LoRA classifiers of Table 7 trained on the released 1,080 labels, scored on the released 120.
rule cdv_classifier_release_lora:
    input:
        **cdv_release_labels(),
    output:
        "results/cdv/classifier/release_lora/{lora}.json",
    log:
        "results/logs/cdv/classifier_release_lora/{lora}.log",
    benchmark:
        "results/benchmarks/cdv/classifier_release_lora/{lora}.tsv"
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
        "../../scripts/cdv_classifier_release_lora.py"
