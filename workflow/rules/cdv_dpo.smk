# CDV mitigation by preference training (section 5, Table 5): DPO pairs from the searches, then training.


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
