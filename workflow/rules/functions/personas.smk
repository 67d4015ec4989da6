# Input functions, wildcard patterns and output lists of the personas stage (its rules: ../personas.smk).

PERSONA_SOURCE_RE = _alternation(config["personas"]["sources"])


def domain_agreement_datasets():
    """Datasets whose user-given domains file is compared with the automatic assignment (needs a taxonomy)."""
    if not config["personas"]["domain_agreement"]:
        return []
    if not Path(config["personas"]["taxonomy"]).is_file():
        return []
    return [d for d in judging_datasets() if dataset_entry(d)["domains"]]


def domain_agreement_outputs():
    if not domain_agreement_datasets():
        return []
    return [
        *(
            f"results/data/{d}/domain_agreement.json"
            for d in domain_agreement_datasets()
        ),
        *(
            f"results/tables/{name}.{ext}"
            for name in ("domain_agreement", "domain_confusion")
            for ext in ("csv", "md", "tex")
        ),
    ]


def persona_source(name):
    return config["personas"]["sources"][name]


def persona_pool_inputs(wildcards):
    path = persona_source(wildcards.source)["path"]
    return {"records": path} if path else {}


def persona_selection_inputs(wildcards):
    return {
        "pool": f"results/personas/{wildcards.source}/pool.jsonl",
        "embeddings": f"results/personas/{wildcards.source}/embeddings.npy",
        "topics": TOPICS.format(dataset=wildcards.dataset),
        "domains": f"results/data/{wildcards.dataset}/domains.tsv",
        **taxonomy_input(),
    }
