# Persona pools (built and embedded once per source) and the retrieved roles per dataset and source.
# Input functions live in common.smk under "-- data and personas --".


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
    threads: 2
    resources:
        **config["resources"]["embedding"],
    params:
        source=lambda w: persona_source(w.source),
        embedding=config["embedding"],
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
    threads: 2
    resources:
        **config["resources"]["embedding"],
    params:
        candidates=config["personas"]["candidates"],
        embedding=config["embedding"],
        orthogonal=config["personas"]["orthogonal"],
    script:
        "../../scripts/select_personas.py"
