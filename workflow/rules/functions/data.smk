# Input functions, wildcard patterns and output lists of the data stage (its rules: ../data.smk).

# The prepared topics of a dataset, read by most stages: the one place its path is written.
TOPICS = "results/data/{dataset}/topics.tsv"


def judging_datasets():
    return list(config["judging"]["datasets"])


DATASET_RE = _alternation(judging_datasets())


def dataset_entry(name):
    return config["judging"]["datasets"][name]


def dataset_inputs(wildcards):
    """The configured files of a dataset (an ir_datasets one only has its runs) and optional run metadata."""
    entry = dataset_entry(wildcards.dataset)
    inputs = {"runs": entry["runs"]}
    if entry["source"] == "local":
        inputs.update(
            topics=entry["topics"], qrels=entry["qrels"], passages=entry["passages"]
        )
    if entry["run_metadata"]:
        inputs["run_metadata"] = entry["run_metadata"]
    return inputs


def dataset_params(wildcards):
    """What decides a dataset's prepared files (not `summarize`/`domains`: editing those reruns nothing here)."""
    entry = dataset_entry(wildcards.dataset)
    return {k: v for k, v in entry.items() if k not in ("summarize", "domains")}


def taxonomy_input():
    """The taxonomy when it exists; when it does not, the scripts say which config key to fix."""
    path = config["personas"]["taxonomy"]
    return {"taxonomy": path} if Path(path).is_file() else {}


def domain_inputs(wildcards):
    inputs = {
        "topics": TOPICS.format(dataset=wildcards.dataset),
        **taxonomy_input(),
    }
    if dataset_entry(wildcards.dataset)["domains"]:
        inputs["mapping"] = dataset_entry(wildcards.dataset)["domains"]
    return inputs


def domain_embedding(wildcards):
    """The embedding settings, only for datasets whose domains are assigned by similarity."""
    return None if dataset_entry(wildcards.dataset)["domains"] else embedding_settings()
