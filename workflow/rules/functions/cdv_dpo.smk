# Input functions of the CDV DPO experiment and the search-free benchmark (its rules: ../cdv_dpo.smk).

# The DPO held-out split as a benchmark file: Table 5's comparison rows are models evaluated on it.
CDV_DPO_HELDOUT = "dpo_heldout"


def cdv_dpo_cells():
    """(dataset, proxy, victim) of the cells DPO pairs come from: `cdv.dpo.pair_cells` (the release's: the
    scale-up only), else every cell."""
    named = [(c["proxy"], c["victim"]) for c in config["cdv"]["dpo"]["pair_cells"]]
    cells = cdv_cells()
    for i, cell in enumerate(named):
        if cell not in {c[1:] for c in cells}:
            raise ValueError(
                f"config key 'cdv.dpo.pair_cells[{i}]': {cell[0]}/{cell[1]} is no search cell of the "
                "study; name one of cdv.cells or cdv.experiments"
            )
    return [c for c in cells if not named or c[1:] in named]


def cdv_dpo_cell_files(name):
    return [f"{cdv_cell_dir(*cell)}/{name}" for cell in cdv_dpo_cells()]


def cdv_dpo_eval_files():
    """Each pair cell's evaluation files, in the order of `cdv.dpo.pair_evaluators` (the release takes the
    first right and the first wrong answer in its order), else of the cell's evaluators.
    """
    named = config["cdv"]["dpo"]["pair_evaluators"]
    files = []
    for d, p, v in cdv_dpo_cells():
        evaluators = cdv_eval_models(v, p)
        for i, model in enumerate(named):
            if model not in evaluators:
                raise ValueError(
                    f"config key 'cdv.dpo.pair_evaluators[{i}]': {model} does not evaluate the cell "
                    f"{p}/{v}; name one of {', '.join(evaluators)}"
                )
        files += [
            f"{cdv_cell_dir(d, p, v)}/eval/{m}.jsonl" for m in named or evaluators
        ]
    return files


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
