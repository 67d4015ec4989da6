# CDV mitigation by preference training (Table 5): DPO pairs from the searches, one training per base model,
# and the search-free benchmark: any registry model on a file of perturbed questions (the DPO held-out
# split for Table 5's comparison rows, or a file the user names in `cdv.benchmark.files`).


include: "functions/cdv_dpo.smk"


rule cdv_dpo_export:
    input:
        perturbed=cdv_dpo_cell_files("perturbed.jsonl"),
        searches=cdv_dpo_cell_files("search.jsonl"),
        evals=cdv_dpo_eval_files(),
        # The held-out questions' originals, for Retain on the originals.
        questions=expand(CDV_QUESTIONS, dataset=cdv_datasets()),
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
        pairs=config["cdv"]["dpo"]["pairs"],
        answer_line=config["cdv"]["dpo"]["answer_line"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_dpo_export.py"


rule cdv_dpo_train:
    input:
        train="results/cdv/dpo/train.jsonl",
        validation="results/cdv/dpo/validation.jsonl",
        heldout="results/cdv/dpo/heldout.jsonl",
    output:
        done="results/cdv/dpo/model/{dpo_model}/done.json",
    log:
        "results/logs/cdv/dpo_train/{dpo_model}.log",
    benchmark:
        "results/benchmarks/cdv/dpo_train/{dpo_model}.tsv"
    wildcard_constraints:
        dpo_model=_alternation(cdv_dpo_models()),
    conda:
        "../../envs/dpo.yaml"
    threads: config["cdv"]["dpo"]["threads"]
    resources:
        **config["resources"]["dpo"],
        gpu=1,
    params:
        base_model=lambda w: cdv_dpo_models()[w.dpo_model],
        settings=config["cdv"]["dpo"],
        seed=config["seed"],
    script:
        "../../scripts/cdv_dpo_train.py"


rule cdv_benchmark:
    input:
        questions=lambda w: cdv_benchmark_files()[w.benchmark],
    output:
        records="results/cdv/benchmark/{benchmark}/{model}.jsonl",
        usage="results/cdv/benchmark/{benchmark}/{model}.usage.json",
    log:
        "results/logs/cdv/benchmark/{benchmark}/{model}.log",
    benchmark:
        "results/benchmarks/cdv/benchmark/{benchmark}/{model}.tsv"
    wildcard_constraints:
        benchmark=_alternation(cdv_benchmark_files()),
        model=CDV_NAME_RE,
    conda:
        llm_env(cell_model)
    threads: llm_threads(cell_model)
    resources:
        **llm_resources(cell_model),
    params:
        models=lambda w: cdv_models_of([w.model]),
        answering=cdv_eval_settings,
    script:
        "../../scripts/cdv_benchmark.py"
