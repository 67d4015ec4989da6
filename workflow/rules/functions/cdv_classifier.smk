# Input functions of the CDV classifier and the cost experiment (its rules: ../cdv_classifier.smk).


def cdv_classifier_roles():
    """Models of the post-hoc classifier job: the prompt classifier's model per victim, and the study's
    prompt-based classifiers."""
    classifier = config["cdv"]["classifier"]
    names = set(classifier["prompt_models"])
    if classifier["kind"] == "prompt":
        names |= {classifier["model"] or v for _, _, v in cdv_label_cells()}
    return sorted(names)


def cdv_classifier_models(wildcards):
    return cdv_classifier_roles()


def cdv_release_prompt_models(wildcards):
    """The prompt classifiers the release study asks (Table 7 on the released labels)."""
    return config["cdv"]["classifier"]["prompt_models"]


def cdv_classifier_resources():
    """The classifier embeds questions and asks its prompt models, one after another: a GPU job sized for the
    largest when one of them runs on vllm, an embedding job otherwise."""
    if any(map(is_vllm, cdv_classifier_roles())):
        return llm_resources(cdv_classifier_models)
    return config["resources"]["embedding"]


def cdv_label_cells():
    """(dataset, proxy, victim) of the cells whose searches label the classifier's questions."""
    chosen = {
        (c["proxy"], c["victim"]) for c in config["cdv"]["classifier"]["label_cells"]
    }
    return [cell for cell in cdv_cells() if not chosen or cell[1:] in chosen]


def cdv_label_files(name):
    return [f"{cdv_cell_dir(*cell)}/{name}" for cell in cdv_label_cells()]


def cdv_cost_study():
    """The cost experiment's settings with its proxy and victim resolved; None when it is off."""
    study = dict(config["cdv"]["classifier"]["cost_study"])
    if not study["enabled"] or not cdv_label_cells():
        return None
    _, proxy, victim = cdv_label_cells()[0]
    study["proxy"] = study["proxy"] or proxy
    study["victim"] = study["victim"] or victim
    return study


def cdv_cost_cells():
    """(dataset, proxy, victim) of the cost experiment's searches (datasets `<name>.<selection>`)."""
    study = cdv_cost_study()
    if study is None:
        return []
    return [
        (_cdv_experiments.selection_dataset(d, s), study["proxy"], study["victim"])
        for d in cdv_datasets()
        for s in cdv_cost_selections()
    ]


def cdv_filter_lora():
    """File name of the LoRA classifier that filters (`classifier.filter_with: lora:<id>`), else None."""
    chosen = config["cdv"]["classifier"]["filter_with"]
    if chosen == "trained":
        return None
    by_id = {model: name for name, model in cdv_lora_models().items()}
    if chosen.removeprefix("lora:") not in by_id:
        raise StressprobeError(
            f"cdv.classifier.filter_with: {chosen} is not one of cdv.classifier.lora.base_models "
            "(with lora.enabled); name one of them or use `trained`"
        )
    return by_id[chosen.removeprefix("lora:")]


def cdv_cost_selections():
    """The cost experiment's question sets per dataset: the filtering classifier's and random ones, and the
    MiniLM classifier's when a LoRA classifier filters and `cost_study.minilm_row` asks for it.
    """
    study = config["cdv"]["classifier"]["cost_study"]
    extra = (
        [_cdv_experiments.MINILM] if cdv_filter_lora() and study["minilm_row"] else []
    )
    return list(_cdv_experiments.SELECTIONS) + extra


def cdv_selection_pool(selection):
    """The scored pool a selection is drawn from (random draws ignore the scores)."""
    lora = cdv_filter_lora()
    if lora and selection != _cdv_experiments.MINILM:
        return f"results/cdv/classifier/lora/{lora}.pool.jsonl"
    return "results/cdv/classifier/pool.jsonl"


def cdv_filter_scores():
    """The filtering classifier's scores of the labelled questions (Table 2)."""
    lora = cdv_filter_lora()
    if lora:
        return f"results/cdv/classifier/lora/{lora}.json"
    return "results/cdv/classifier/predictions.jsonl"


def cdv_table2_cells():
    """(dataset, victim, victim) of Table 2's self-search cells, one per dataset and victim."""
    victims = config["cdv"]["classifier"]["table2"]["victims"]
    specs = cdv_cell_specs()
    missing = [v for v in victims if (v, v) not in specs]
    if missing:
        raise StressprobeError(
            f"cdv.classifier.table2.victims: {', '.join(missing)} has no self-search cell "
            "(proxy = victim) in cdv.cells or cdv.experiments; add one or remove the victim"
        )
    return [(d, v, v) for v in victims for d in cdv_datasets()]


def cdv_lora_models():
    """File name -> Hugging Face id of the LoRA classifiers (none unless `classifier.lora.enabled`)."""
    lora = config["cdv"]["classifier"]["lora"]
    if not lora["enabled"]:
        return {}
    return {_cdv_experiments.file_name(model): model for model in lora["base_models"]}


def cdv_cell_prices():
    """Price of every model that some cell's search runs under some role (the classifier job's cost
    columns): as a param, editing an unrelated model's price reruns nothing."""
    cells = cdv_cells() + cdv_cost_cells()
    names = {name for _, p, v in cells for name in cell_roles(p, v).values()}
    return {name: config["models"][name].get("price", {}) for name in sorted(names)}


def cdv_release_labels():
    """The released label files of Table 7's study from the release (`classifier.release`: a path or
    `source:<name>` each), as the rule's named inputs; none when it is off."""
    release = config["cdv"]["classifier"]["release"]
    if not release["train"] and not release["test"]:
        return {}
    for name in ("train", "test"):
        if not release[name]:
            raise StressprobeError(
                f"config key 'cdv.classifier.release.{name}': the release study needs both label files; "
                "give it or remove the other"
            )
    return {
        name: source_file(release[name], f"cdv.classifier.release.{name}")
        for name in ("train", "test")
    }


# The filter, Table 2 and the release study name models or files: a typo is one error line before planning.
stop_on_error(cdv_filter_lora)
stop_on_error(cdv_table2_cells)
stop_on_error(cdv_release_labels)
