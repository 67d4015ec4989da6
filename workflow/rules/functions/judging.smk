# Input functions, wildcard patterns and output lists of the judging stage (its rules: ../judging.smk).

from stressprobe.persona import judging as _judging


def judge_models():
    return config["judging"]["models"]


def label_calibration(name):
    """How a judge model's labels are read: `none` (parsed from the answer) or `batch` (stressprobe.persona.calibration)."""
    return config["judging"]["calibration"].get(name, "none")


def judging_conditions():
    return config["judging"]["conditions"]


def external_judges():
    """Names of the registered external judgments (evaluated like further judge models)."""
    return list(config["judging"]["external"])


def external_conditions(name, dataset):
    return list(config["judging"]["external"][name].get(dataset, {}))


def _check_judging_config():
    """Judge, external and human names share the qrels/nDCG paths: they must not collide."""
    external = config["judging"]["external"]
    for name, per_dataset in external.items():
        if name == _judging.HUMAN or name in judge_models():
            raise StressprobeError(
                f"config key 'judging.external.{name}': the name is already a judge model or 'human'; rename it"
            )
        for dataset in per_dataset:
            if dataset not in config["judging"]["datasets"]:
                raise StressprobeError(
                    f"config key 'judging.external.{name}.{dataset}': no such dataset in 'judging.datasets'; "
                    "fix the name or add the dataset"
                )
    if _judging.HUMAN in judge_models():
        raise StressprobeError(
            "config key 'judging.models': 'human' is reserved for the human qrels; rename the model"
        )
    for name, method in config["judging"]["calibration"].items():
        if name not in judge_models():
            raise StressprobeError(
                f"config key 'judging.calibration.{name}': not one of 'judging.models'; fix the name"
            )
        if method != "none" and config["judging"]["logprobs"] < 1:
            raise StressprobeError(
                f"config key 'judging.calibration.{name}': {method} calibration reads the label distribution; "
                "set 'judging.logprobs' to 5 (or another k >= 1)"
            )


stop_on_error(_check_judging_config)


# -- the judge prompt template: a local file, or a pinned source fetched (and checksummed) by a job --
stop_on_error(_fetch.refuse_url, config["judging"]["prompt"], "judging.prompt")


def judge_template():
    """The judge template file jobs read: the configured path, or the pinned source's file."""
    return source_file(config["judging"]["prompt"], "judging.prompt")


def summary_template():
    """The summary template file jobs read: the configured path, or the pinned source's file."""
    return source_file(config["judging"]["summary_prompt"], "judging.summary_prompt")


def fixed_delivery(wildcards):
    """How a fixed persona is delivered (`personas.delivery`), only for that role; {} for other conditions."""
    if wildcards.source != "fixed":
        return {}
    return {wildcards.role: config["personas"]["delivery"][wildcards.role]}


JUDGE_MODEL_RE = _alternation(judge_models())
# vLLM judges answer all conditions of a dataset in one job (one model load); the others one job per cell.
_GROUPED = config["judging"]["vllm_one_job_per_dataset"]
CELL_JUDGE_RE = _alternation(
    [m for m in judge_models() if not (_GROUPED and is_vllm(m))]
)
VLLM_JUDGE_RE = _alternation([m for m in judge_models() if _GROUPED and is_vllm(m)])
EXTERNAL_RE = _alternation(external_judges())
# Sources and roles of the configured conditions (judges and external judgments):
# a cell outside them has no rule.
_USED_CONDITIONS = set(judging_conditions()).union(
    *(
        conditions
        for per_dataset in config["judging"]["external"].values()
        for conditions in per_dataset.values()
    )
)
CONDITION_SOURCE_RE = _alternation(sorted({c.split("/")[0] for c in _USED_CONDITIONS}))
ROLE_RE = _alternation(sorted({c.split("/")[1] for c in _USED_CONDITIONS}))


def summarizes(dataset):
    """Whether the dataset's passages are summarized (else judges read the passages themselves)."""
    return config["judging"]["datasets"][dataset]["summarize"]


def summarizer(dataset):
    """The summarizer model of a dataset, or None when summarization is off for it (or nothing is judged
    by a model: with no judge models there is nothing to summarize for)."""
    if not summarizes(dataset) or not judge_models():
        return None
    return config["judging"]["summarizer"] or judge_models()[0]


def summarizer_entries(wildcards):
    """The registry entry of the dataset's summarizer only, so editing another model reruns nothing here."""
    name = summarizer(wildcards.dataset)
    return {} if name is None else {name: model_entry(name)}


def summarizer_model(wildcards):
    return [summarizer(wildcards.dataset)]


def summary_inputs(wildcards):
    inputs = {
        "pairs": f"results/data/{wildcards.dataset}/pairs.jsonl",
        "topics": TOPICS.format(dataset=wildcards.dataset),
    }
    if summarizes(wildcards.dataset):
        inputs["template"] = summary_template()
    return inputs


def judge_inputs(wildcards):
    """A cell reads the dataset's summaries and topics, the prompt, and for retrieved roles the persona table."""
    inputs = {
        "summaries": f"results/judging/{wildcards.dataset}/summaries.jsonl",
        "topics": TOPICS.format(dataset=wildcards.dataset),
        "template": judge_template(),
    }
    if _judging.is_retrieved(wildcards.source):
        inputs["personas"] = (
            f"results/judging/{wildcards.dataset}/personas/{wildcards.source}.jsonl"
        )
    return inputs


def judge_group_inputs(wildcards):
    """A vLLM judge job reads what all its cells read: one persona table per retrieved source."""
    inputs = {
        "summaries": f"results/judging/{wildcards.dataset}/summaries.jsonl",
        "topics": TOPICS.format(dataset=wildcards.dataset),
        "template": judge_template(),
    }
    for source in sorted({c.split("/")[0] for c in judging_conditions()}):
        if _judging.is_retrieved(source):
            inputs[f"personas_{source}"] = (
                f"results/judging/{wildcards.dataset}/personas/{source}.jsonl"
            )
    return inputs


def judge_group_outputs(kind):
    """`{kind}` file of every condition of one (dataset, model) vLLM judge job (wildcards kept)."""
    return [
        f"results/judging/{{dataset}}/judgments/{{model}}/{condition}{kind}"
        for condition in judging_conditions()
    ]


def fixed_personas_of_conditions():
    """condition -> its fixed assessor text (None for the others), as one vLLM judge job's param."""
    texts = {}
    for condition in judging_conditions():
        source, role = _judging.split_condition(condition)
        texts[condition] = (
            config["personas"]["fixed"][role] if source == "fixed" else None
        )
    return texts


def fixed_persona(wildcards):
    """The text of a fixed assessor role (only that one, so editing the other reruns nothing), else None."""
    if wildcards.source != "fixed":
        return None
    return config["personas"]["fixed"][wildcards.role]


def external_qrels_file(wildcards):
    return config["judging"]["external"][wildcards.model][wildcards.dataset][
        f"{wildcards.source}/{wildcards.role}"
    ]


def judging_cells(dataset):
    """(model, condition) of every qrels/nDCG table of a dataset: judges, external judgments, and human."""
    cells = [
        (model, condition)
        for model in judge_models()
        for condition in judging_conditions()
    ]
    cells += [
        (name, condition)
        for name in external_judges()
        for condition in external_conditions(name, dataset)
    ]
    return cells + [(_judging.HUMAN, f"{_judging.HUMAN}/{_judging.HUMAN}")]


def judging_outputs():
    """Every dataset's qrels and nDCG table of every cell (judgments, personas and summaries come with them)."""
    outputs = []
    for dataset in judging_datasets():
        for model, condition in judging_cells(dataset):
            outputs.append(f"results/judging/{dataset}/qrels/{model}/{condition}.qrels")
            outputs.append(f"results/judging/{dataset}/ndcg/{model}/{condition}.tsv")
    return outputs
