# Judging study: summaries per dataset, one judge job per (dataset, model, source, role) cell, then one
# scoring job per cell (its TREC qrels and nDCG@10 of every run under them), and the human and external
# qrels with their nDCG tables.


include: "functions/judging.smk"


rule summarize:
    input:
        unpack(summary_inputs),
    output:
        summaries="results/judging/{dataset}/summaries.jsonl",
        usage="results/judging/{dataset}/summaries.usage.json",
    log:
        "results/logs/judging/{dataset}/summarize.log",
    benchmark:
        "results/benchmarks/judging/{dataset}/summarize.tsv"
    wildcard_constraints:
        dataset=DATASET_RE,
    conda:
        llm_env(summarizer_model)
    threads: llm_threads(summarizer_model)
    resources:
        **llm_resources(summarizer_model),
    params:
        models=summarizer_entries,
        summarizer=lambda w: summarizer(w.dataset),
        max_tokens=config["judging"]["summary_max_tokens"],
    script:
        "../../scripts/summarize.py"


rule judge:
    input:
        unpack(judge_inputs),
    output:
        judgments="results/judging/{dataset}/judgments/{model}/{source}/{role}.jsonl",
        usage="results/judging/{dataset}/judgments/{model}/{source}/{role}.usage.json",
        summary="results/judging/{dataset}/judgments/{model}/{source}/{role}.summary.json",
    log:
        "results/logs/judging/{dataset}/judge/{model}/{source}/{role}.log",
    benchmark:
        "results/benchmarks/judging/{dataset}/judge/{model}/{source}/{role}.tsv"
    wildcard_constraints:
        dataset=DATASET_RE,
        model=CELL_JUDGE_RE,
        source=CONDITION_SOURCE_RE,
        role=ROLE_RE,
    conda:
        llm_env(cell_model)
    threads: llm_threads(cell_model)
    resources:
        **llm_resources(cell_model),
    params:
        models=lambda w: {w.model: model_entry(w.model)},
        persona=fixed_persona,
        max_tokens=config["judging"]["judge_max_tokens"],
        logprobs=config["judging"]["logprobs"],
        prefill=lambda w: model_prefill(w.model, config["judging"]["answer_prefix"]),
        delivery=fixed_delivery,
        system_message=config["judging"]["system_message"],
        reader=config["judging"]["answer_reader"],
        calibration=lambda w: label_calibration(w.model),
    script:
        "../../scripts/judge.py"


# A vLLM judge loads its model once per dataset: one job writes every condition's cell (the same files as
# `judge`); a target of one cell builds them all, and a rerun answers unchanged cells from the cache.
rule judge_vllm:
    input:
        unpack(judge_group_inputs),
    output:
        judgments=judge_group_outputs(".jsonl"),
        usage=judge_group_outputs(".usage.json"),
        summary=judge_group_outputs(".summary.json"),
    log:
        "results/logs/judging/{dataset}/judge/{model}.log",
    benchmark:
        "results/benchmarks/judging/{dataset}/judge/{model}.tsv"
    wildcard_constraints:
        dataset=DATASET_RE,
        model=VLLM_JUDGE_RE,
    conda:
        llm_env(cell_model)
    threads: llm_threads(cell_model)
    resources:
        **llm_resources(cell_model),
    params:
        models=lambda w: {w.model: model_entry(w.model)},
        conditions=judging_conditions(),
        personas=fixed_personas_of_conditions(),
        max_tokens=config["judging"]["judge_max_tokens"],
        logprobs=config["judging"]["logprobs"],
        prefill=lambda w: model_prefill(w.model, config["judging"]["answer_prefix"]),
        delivery=config["personas"]["delivery"],
        system_message=config["judging"]["system_message"],
        reader=config["judging"]["answer_reader"],
    script:
        "../../scripts/judge_group.py"


rule judge_qrels:
    # A judge cell's qrels and the nDCG@10 of every run under them, in one job: both take well under a
    # second, less than a Python start-up, and one always follows the other. External and human qrels
    # get their nDCG table from the `ndcg` rule.
    input:
        judgments="results/judging/{dataset}/judgments/{model}/{source}/{role}.jsonl",
        runs="results/data/{dataset}/runs.txt",
        topics=TOPICS,
    output:
        qrels="results/judging/{dataset}/qrels/{model}/{source}/{role}.qrels",
        ndcg="results/judging/{dataset}/ndcg/{model}/{source}/{role}.tsv",
    log:
        "results/logs/judging/{dataset}/qrels/{model}/{source}/{role}.log",
    wildcard_constraints:
        dataset=DATASET_RE,
        model=JUDGE_MODEL_RE,
        source=CONDITION_SOURCE_RE,
        role=ROLE_RE,
    group:
        "scoring"
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        unparsed=config["judging"]["unparsed"],
    script:
        "../../scripts/write_qrels.py"


rule human_qrels:
    input:
        "results/data/{dataset}/qrels.txt",
    output:
        "results/judging/{dataset}/qrels/human/human/human.qrels",
    log:
        "results/logs/judging/{dataset}/qrels/human.log",
    wildcard_constraints:
        dataset=DATASET_RE,
    group:
        "scoring"
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    shell:
        "cp {input} {output} 2> {log}"


rule external_qrels:
    input:
        qrels=external_qrels_file,
        topics=TOPICS,
    output:
        "results/judging/{dataset}/qrels/{model}/{source}/{role}.qrels",
    log:
        "results/logs/judging/{dataset}/qrels/{model}/{source}/{role}.log",
    wildcard_constraints:
        dataset=DATASET_RE,
        model=EXTERNAL_RE,
        source=CONDITION_SOURCE_RE,
        role=ROLE_RE,
    group:
        "scoring"
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    script:
        "../../scripts/external_qrels.py"


rule ndcg:
    input:
        qrels="results/judging/{dataset}/qrels/{model}/{source}/{role}.qrels",
        runs="results/data/{dataset}/runs.txt",
        topics=TOPICS,
    output:
        "results/judging/{dataset}/ndcg/{model}/{source}/{role}.tsv",
    log:
        "results/logs/judging/{dataset}/ndcg/{model}/{source}/{role}.log",
    wildcard_constraints:
        dataset=DATASET_RE,
        model=f"{EXTERNAL_RE}|human",
        source=f"{CONDITION_SOURCE_RE}|human",
        role=f"{ROLE_RE}|human",
    group:
        "scoring"
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    script:
        "../../scripts/ndcg.py"
