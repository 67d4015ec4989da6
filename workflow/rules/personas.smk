# Persona pools (built and embedded once per source) and the retrieved roles per dataset and source.


include: "functions/personas.smk"


rule persona_pool:
    input:
        unpack(persona_pool_inputs),
    output:
        pool="results/personas/{source}/pool.jsonl",
        embeddings="results/personas/{source}/embeddings.npy",
    log:
        "results/logs/personas/{source}/pool.log",
    benchmark:
        "results/benchmarks/personas/{source}/pool.tsv"
    wildcard_constraints:
        source=PERSONA_SOURCE_RE,
    conda:
        "../../envs/data.yaml"
    threads: config["embedding"]["threads"]
    resources:
        mem_mb=config["resources"]["persona_pool"]["mem_mb"],
        runtime=config["resources"]["persona_pool"]["runtime"],
        gpu=config["resources"]["persona_pool"].get("gpu", 0),
    params:
        source=lambda w: persona_source(w.source),
        unpinned=config["personas"]["unpinned"],
        runtime=config["resources"]["persona_pool"]["runtime"],
        embedding=config["embedding"],
        # Not an output: Snakemake would delete it with a failed job's outputs; a rerun resumes from it.
        chunks=lambda w: f"results/personas/{w.source}/chunks",
    script:
        "../../scripts/build_persona_pool.py"


rule select_personas:
    input:
        unpack(persona_selection_inputs),
    output:
        "results/judging/{dataset}/personas/{source}.jsonl",
    log:
        "results/logs/personas/{dataset}/{source}.log",
    benchmark:
        "results/benchmarks/personas/{dataset}/{source}.tsv"
    wildcard_constraints:
        dataset=DATASET_RE,
        source=PERSONA_SOURCE_RE,
    conda:
        "../../envs/data.yaml"
    threads: config["embedding"]["threads"]
    resources:
        **config["resources"]["embedding"],
    params:
        candidates=config["personas"]["candidates"],
        embedding=embedding_settings(),
        orthogonal=config["personas"]["orthogonal"],
    script:
        "../../scripts/select_personas.py"


# Only for datasets with a query->domain file (and a taxonomy to assign from): one job embeds every dataset's
# queries with one model load.
rule domain_agreement:
    input:
        topics=[TOPICS.format(dataset=d) for d in domain_agreement_datasets()],
        mappings=[dataset_entry(d)["domains"] for d in domain_agreement_datasets()],
        taxonomy=config["personas"]["taxonomy"],
    output:
        **table_outputs(
            "domain_agreement", "domain_agreement", "Persona study", "Persona sources"
        ),
        **table_outputs(
            "domain_confusion",
            "domain_confusion",
            "Persona study",
            "Persona sources",
            key="confusion",
        ),
        json=[
            f"results/data/{d}/domain_agreement.json"
            for d in domain_agreement_datasets()
        ],
    log:
        "results/logs/personas/domain_agreement.log",
    benchmark:
        "results/benchmarks/personas/domain_agreement.tsv"
    conda:
        "../../envs/data.yaml"
    threads: config["embedding"]["threads"]
    resources:
        **config["resources"]["embedding"],
    params:
        datasets=domain_agreement_datasets(),
        embedding=embedding_settings(),
    script:
        "../../scripts/domain_agreement.py"
