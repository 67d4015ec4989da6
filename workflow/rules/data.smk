# Judging datasets: select queries and pairs, normalise the runs, and give every query a taxonomy domain.


include: "functions/data.smk"


rule prepare_dataset:
    input:
        unpack(dataset_inputs),
    output:
        topics=TOPICS,
        qrels="results/data/{dataset}/qrels.txt",
        pairs="results/data/{dataset}/pairs.jsonl",
        runs=directory("results/data/{dataset}/runs"),
        run_names="results/data/{dataset}/runs.txt",
        run_metadata="results/data/{dataset}/run_metadata.tsv",
    log:
        "results/logs/data/{dataset}/prepare.log",
    wildcard_constraints:
        dataset=DATASET_RE,
    conda:
        "../../envs/data.yaml"
    resources:
        **config["resources"]["data"],
    params:
        dataset=dataset_params,
        seed=config["seed"],
    script:
        "../../scripts/prepare_dataset.py"


rule query_domains:
    input:
        unpack(domain_inputs),
    output:
        "results/data/{dataset}/domains.tsv",
    log:
        "results/logs/data/{dataset}/domains.log",
    benchmark:
        "results/benchmarks/data/{dataset}/domains.tsv"
    wildcard_constraints:
        dataset=DATASET_RE,
    conda:
        "../../envs/data.yaml"
    threads: config["embedding"]["threads"]
    resources:
        **config["resources"]["embedding"],
    params:
        taxonomy=config["personas"]["taxonomy"],
        embedding=domain_embedding,
    script:
        "../../scripts/query_domains.py"
