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
        for s in _cdv_experiments.SELECTIONS
    ]


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
