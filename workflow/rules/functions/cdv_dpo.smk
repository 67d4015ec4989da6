# Input functions of the CDV DPO experiment and the search-free benchmark (its rules: ../cdv_dpo.smk).

# The DPO held-out split as a benchmark file: Table 5's comparison rows are models evaluated on it.
CDV_DPO_HELDOUT = "dpo_heldout"


def cdv_dpo_models():
    """File name -> Hugging Face id of the models DPO trains (none unless `cdv.dpo.train`)."""
    dpo = config["cdv"]["dpo"]
    if not dpo["train"]:
        return {}
    return {_cdv_experiments.file_name(m): m for m in dpo["base_models"]}


def cdv_benchmark_files():
    """Benchmark name -> question file: the user's `cdv.benchmark.files`, and the DPO held-out split when
    Table 5's comparison models are set."""
    files = {
        name: source_file(path, f"cdv.benchmark.files.{name}")
        for name, path in config["cdv"]["benchmark"]["files"].items()
    }
    if config["cdv"]["dpo"]["export"] and config["cdv"]["dpo"]["compare_models"]:
        files[CDV_DPO_HELDOUT] = "results/cdv/dpo/heldout.jsonl"
    return files


def cdv_benchmark_models(name):
    """The models evaluated on one benchmark file."""
    if name == CDV_DPO_HELDOUT:
        return config["cdv"]["dpo"]["compare_models"]
    return config["cdv"]["benchmark"]["models"]


def cdv_benchmark_records():
    """Every (benchmark, model) evaluation's records file."""
    return [
        f"results/cdv/benchmark/{name}/{model}.jsonl"
        for name in sorted(cdv_benchmark_files())
        for model in cdv_benchmark_models(name)
    ]
