# Shared helpers and input functions. Stage-specific ones are grouped below under a heading per stage.
import re
import sys
from types import SimpleNamespace
from pathlib import Path

from stressprobe.config import validate_config
from stressprobe.errors import StressprobeError
from stressprobe.io import output_path_problem
from stressprobe.llm import answer_prefill
from stressprobe.provenance import git_commit
import stressprobe.cdv.experiments as _cdv_experiments


def stop_on_error(check, *args):
    """Run `check(*args)`; a StressprobeError becomes one `error:` line and exit status 1, before any job
    runs: a config typo or an unwritable results folder must not surface as a traceback.
    """
    try:
        check(*args)
    except StressprobeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


def check_outputs_writable(jobs):
    """Every output and log of the jobs about to run can be written (see io.output_path_problem)."""
    for job in jobs:
        for path in [*job.output, *job.log]:
            problem = output_path_problem(path)
            if problem:
                raise StressprobeError(problem)


# The schema's sections $ref each other by file name, so read them from the checkout, not the source cache.
stop_on_error(
    validate_config,
    config,
    Path(workflow.basedir) / "workflow" / "schemas" / "config.schema.yaml",
)


# Runs after planning, before the first job (never on a dry run). Snakemake has no public hook for the
# jobs about to run; `workflow.dag` is its plan (checked in tests/test_faults.py on the pinned version).
onstart:
    stop_on_error(check_outputs_writable, workflow.dag.needrun_jobs())


def sorted_dict(value):
    """`value` with every dict's keys in sorted order: params compare by their text, so key order in a
    config file must not matter."""
    if isinstance(value, dict):
        return {key: sorted_dict(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sorted_dict(item) for item in value]
    return value


def model_entry(name):
    """The registry entry of one model: passed as a param so editing it reruns exactly its jobs."""
    return sorted_dict(config["models"][name])


def is_vllm(name):
    """Whether the model runs on vllm (GPU jobs); None, for a job without a model, is not."""
    return name is not None and config["models"][name]["backend"] == "vllm"


def model_resources(name):
    """GPUs for vllm models (routed to the GPU partition by the profile), none for the others or no model."""
    # The schema fills `gpus` of every vllm entry.
    return config["models"][name]["gpus"] if is_vllm(name) else 0


def judging_enabled():
    return config["judging"]["enabled"]


def cdv_enabled():
    return config["cdv"]["enabled"]


def final_outputs():
    """Everything the default target builds: each enabled stage's tables, figures and report inputs."""
    outputs = []
    if judging_enabled():
        outputs += judging_outputs()
        outputs += analysis_outputs()
    if cdv_enabled():
        outputs += cdv_outputs()
    return outputs + provenance_outputs()


def provenance_areas():
    """The results areas this config writes; each gets a provenance record."""
    areas = ["tables", "figures"]
    if judging_enabled():
        areas += ["data", "personas", "judging", "analysis"]
    if cdv_enabled():
        areas += ["cdv"]
    return sorted(areas)


def provenance_outputs():
    return expand("results/{area}/provenance.json", area=provenance_areas())


# ---- data / personas / judging ----

# -- judging (summaries, judge cells, qrels, nDCG) --
import re as _re

from stressprobe.persona import judging as _judging


def _alternation(names):
    """A wildcard constraint matching exactly `names` (and nothing when there are none)."""
    return "|".join(_re.escape(name) for name in names) or "(?!)"


def judge_models():
    return config["judging"]["models"]


def model_prefill(name, prefix):
    """The start of the answer this model is prefilled with (its entry's `answer_prefill`), or None."""
    return answer_prefill(config["models"][name], prefix)


def judging_datasets():
    return list(config["judging"]["datasets"])


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


# -- the judge prompt template: a local file, or a published one fetched (and checksummed) by a job --
from stressprobe import fetch as _fetch

stop_on_error(
    _fetch.check_source,
    config["judging"]["prompt"],
    config["judging"]["prompt_sha256"],
    "judging.prompt",
)


def judge_template():
    """The judge template file jobs read: the configured path, or where the download job puts the URL's file."""
    spec = config["judging"]["prompt"]
    if _fetch.is_url(spec):
        return f"results/prompts/judge_template{_fetch.url_suffix(spec)}"
    return spec


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
DATASET_RE = _alternation(judging_datasets())
# Sources and roles of the configured conditions (judges and external judgments):
# a cell outside them has no rule.
_USED_CONDITIONS = set(judging_conditions()).union(
    *(
        conditions
        for per_dataset in config["judging"]["external"].values()
        for conditions in per_dataset.values()
    )
)
SOURCE_RE = _alternation(sorted({c.split("/")[0] for c in _USED_CONDITIONS}))
ROLE_RE = _alternation(sorted({c.split("/")[1] for c in _USED_CONDITIONS}))


def model_threads(name):
    """CPU threads a job of this model uses: llama.cpp's n_threads, one for the others (and for no model)."""
    entry = config["models"].get(name, {"backend": None})
    # The schema fills `n_threads` of every llamacpp entry.
    return entry["n_threads"] if entry["backend"] == "llamacpp" else 1


def llm_resources(*names):
    """Memory and runtime of a job of these models (None: no model): the `llm_gpu` family when any
    runs on vllm, `llm` otherwise."""
    return config["resources"]["llm_gpu" if any(map(is_vllm, names)) else "llm"]


def model_env(name):
    """The conda environment of a model's jobs: vllm on GPU nodes, the API/llama.cpp one otherwise."""
    if is_vllm(name):
        return "../../envs/judge-vllm.yaml"
    return "../../envs/judge-api.yaml"


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


def summarizer_gpus(wildcards):
    return model_resources(summarizer(wildcards.dataset))


def summary_inputs(wildcards):
    inputs = {
        "pairs": f"results/data/{wildcards.dataset}/pairs.jsonl",
        "topics": f"results/data/{wildcards.dataset}/topics.tsv",
    }
    if summarizes(wildcards.dataset):
        inputs["template"] = config["judging"]["summary_prompt"]
    return inputs


def judge_inputs(wildcards):
    """A cell reads the dataset's summaries and topics, the prompt, and for retrieved roles the persona table."""
    inputs = {
        "summaries": f"results/judging/{wildcards.dataset}/summaries.jsonl",
        "topics": f"results/data/{wildcards.dataset}/topics.tsv",
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
        "topics": f"results/data/{wildcards.dataset}/topics.tsv",
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


# -- data and personas --
PERSONA_SOURCE_RE = _alternation(config["personas"]["sources"])


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
        "topics": f"results/data/{wildcards.dataset}/topics.tsv",
        **taxonomy_input(),
    }
    if dataset_entry(wildcards.dataset)["domains"]:
        inputs["mapping"] = dataset_entry(wildcards.dataset)["domains"]
    return inputs


def domain_embedding(wildcards):
    """The embedding settings, only for datasets whose domains are assigned by similarity."""
    return None if dataset_entry(wildcards.dataset)["domains"] else config["embedding"]


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
        "topics": f"results/data/{wildcards.dataset}/topics.tsv",
        "domains": f"results/data/{wildcards.dataset}/domains.tsv",
        **taxonomy_input(),
    }


# ---- analysis ----
# Analysis reads the judging stage's files (judgments or external qrels, nDCG tables, human qrels, topics,
# run metadata) and config only through params: each table/figure rule gets just the keys it depends on.
ANALYSIS_TABLES = {
    "kappa": ["kappa_agreement"],
    "win_rate": ["table3_win_rate", "table3_significance"],
    "label_shift": ["label_shift"],
    "ranking": ["table4_ranking_agreement", "table4_ranking_agreement_paper"],
    "displacement": ["table5_rank_displacement"],
    "displacement_ci": ["table6_displacement_ci"],
    "sensitive": ["table7_sensitive_systems", "table7_sensitive_systems_paper"],
    "direction": ["direction_consistency", "direction_consistency_counts"],
    "sources": ["persona_sources"],
    "vs_paper": ["vs_paper", "vs_paper_summary"],
}
ANALYSIS_FIGURES = ["figure1_kappa_heatmap", "label_shift", "figure2_ndcg_scatter"]


def analysis_order():
    """Datasets, models and conditions in config order (tables and figures list them so)."""
    # _check_judging_config keeps external judgments to configured datasets, so _USED_CONDITIONS holds
    # exactly the conditions of these datasets.
    return {
        "dataset": judging_datasets(),
        "model": [*judge_models(), *external_judges()],
        "condition": [c for c in _judging.CONDITIONS if c in _USED_CONDITIONS],
    }


def analysis_label_cells(wildcards):
    """(model, condition) of every judged cell of a dataset (human excluded), in input order."""
    return [
        cell for cell in judging_cells(wildcards.dataset) if cell[0] != _judging.HUMAN
    ]


def analysis_label_files(wildcards):
    """Per label cell: the judgments file of a judge model, the qrels of an external judgment."""
    return [
        (
            f"results/judging/{wildcards.dataset}/judgments/{model}/{condition}.jsonl"
            if model in judge_models()
            else f"results/judging/{wildcards.dataset}/qrels/{model}/{condition}.qrels"
        )
        for model, condition in analysis_label_cells(wildcards)
    ]


def analysis_ndcg_cells(wildcards):
    return judging_cells(wildcards.dataset)


def analysis_ndcg_files(wildcards):
    return [
        f"results/judging/{wildcards.dataset}/ndcg/{m}/{c}.tsv"
        for m, c in analysis_ndcg_cells(wildcards)
    ]


def analysis_figure_options():
    """Only the figure keys, so that editing them reruns the figures and no table."""
    keys = ("figure_width_in", "font_size", "panel_columns", "dpi")
    return {key: config["analysis"][key] for key in keys}


def analysis_table_files(family):
    return [
        f"results/tables/{name}.{ext}"
        for name in ANALYSIS_TABLES[family]
        for ext in ("csv", "md", "tex")
    ]


def analysis_outputs():
    """Every table (csv, md, tex) and figure (png, pdf) of the persona study."""
    tables = [
        path for family in ANALYSIS_TABLES for path in analysis_table_files(family)
    ]
    tables += domain_agreement_outputs()
    return tables + [
        f"results/figures/{name}.{ext}"
        for name in ANALYSIS_FIGURES
        for ext in ("png", "pdf")
    ]


# ---- cdv ----


def cdv_env(names):
    """The conda environment of a CDV job: the vLLM one when any of its models runs on vllm."""
    if any(map(is_vllm, names)):
        return "../../envs/judge-vllm.yaml"
    return "../../envs/cdv.yaml"


def cdv_threads(names):
    return max(model_threads(name) for name in names)


def cdv_datasets():
    return list(config["cdv"]["datasets"])


def cdv_cell_specs():
    """(proxy, victim) -> n, eval_models and experiments, from `cdv.cells` and `cdv.experiments`."""
    return _cdv_experiments.cell_specs(config["cdv"])


def cdv_cells():
    """(dataset, proxy, victim) of every search cell of the study (not the cost experiment's)."""
    return [(d, p, v) for d in cdv_datasets() for p, v in cdv_cell_specs()]


def cdv_cell_n(proxy, victim):
    """Questions per dataset searched in a cell (None = the dataset's whole sample)."""
    spec = cdv_cell_specs().get((proxy, victim))
    return spec["n"] if spec else None


def cdv_cell_questions(wildcards):
    """A cell's questions: the dataset's sample, its nested subsample of the cell's n, or (for the cost
    experiment's `<dataset>.selected` / `.random` datasets) the selection."""
    n = cdv_cell_n(wildcards.proxy, wildcards.victim)
    if wildcards.dataset in cdv_datasets() and n is not None:
        return f"results/cdv/data/n{n}/{wildcards.dataset}.jsonl"
    return f"results/cdv/data/{wildcards.dataset}.jsonl"


def cdv_cell_dir(dataset, proxy, victim):
    return f"results/cdv/{dataset}/{proxy}/{victim}"


def cdv_eval_models(victim, proxy=None):
    """Models evaluated on a cell: its experiments' (else `cdv.eval_models`, else the cell's victim)."""
    spec = cdv_cell_specs().get((proxy, victim)) if proxy else None
    if spec:
        return spec["eval_models"]
    return config["cdv"]["eval_models"] or [victim]


def cell_roles(proxy, victim):
    """role -> model name of a cell's search job (the classifier only when it filters inside the search)."""
    roles = {
        "proxy": proxy,
        "victim": victim,
        "semantic": config["cdv"]["semantic_model"] or victim,
    }
    classifier = config["cdv"]["classifier"]
    if classifier["kind"] == "prompt" and classifier["filter_search"]:
        roles["classifier"] = classifier["model"] or victim
    return roles


def cdv_search_roles(wildcards):
    return cell_roles(wildcards.proxy, wildcards.victim)


def cdv_models_of(names):
    """The registry entries of `names` (as params: editing another model reruns nothing here)."""
    return {name: model_entry(name) for name in sorted(set(names))}


def cdv_baseline_model(wildcards):
    return config["cdv"]["baseline_model"] or wildcards.proxy


def cdv_eval_inputs(wildcards):
    cell = cdv_cell_dir(wildcards.dataset, wildcards.proxy, wildcards.victim)
    inputs = {
        "questions": cdv_cell_questions(wildcards),
        "perturbed": f"{cell}/perturbed.jsonl",
    }
    if config["cdv"]["baselines"]["enabled"]:
        inputs["baselines"] = f"{cell}/baselines.jsonl"
    return inputs


def cdv_cell_files(name):
    """`name` (e.g. search.jsonl) in every cell directory."""
    return [f"{cdv_cell_dir(*cell)}/{name}" for cell in cdv_cells()]


def cdv_eval_files(kind="eval"):
    """Every `{kind}/{model}.jsonl` of every cell (kind: eval or mitigation)."""
    return [
        f"{cdv_cell_dir(d, p, v)}/{kind}/{model}.jsonl"
        for d, p, v in cdv_cells()
        for model in cdv_eval_models(v, p)
    ]


def cdv_grouped_eval_models():
    """vLLM models of `cdv.eval_models` evaluated on all cells of a dataset in one job (rule cdv_eval_vllm).

    Only with an explicit `eval_models` list: without one, each cell evaluates its own victim, which a
    single job per (dataset, victim) does already.
    """
    if not config["cdv"]["eval"]["vllm_one_job_per_dataset"]:
        return []
    return [
        m
        for m in config["cdv"]["eval_models"]
        if is_vllm(m) and all(m in cdv_eval_models(v, p) for p, v in cdv_cell_specs())
    ]


CDV_VLLM_EVAL_RE = _alternation(cdv_grouped_eval_models())
# cdv_eval and cdv_mitigation: every evaluated model except the grouped ones.
CDV_CELL_EVAL_RE = _alternation(
    sorted(
        {m for _, p, v in cdv_cells() for m in cdv_eval_models(v, p)}
        - set(cdv_grouped_eval_models())
    )
)


def cdv_group_cells():
    """(proxy, victim) of every search cell, in a fixed order: a grouped vLLM evaluation covers them all."""
    return sorted(cdv_cell_specs())


def cdv_group_outputs(kind, suffix):
    """`{kind}/{model}{suffix}` of every search cell of a dataset (wildcards kept); none for mitigation when
    it is off."""
    if kind == "mitigation" and not config["cdv"]["mitigation"]["enabled"]:
        return []
    return [
        f"results/cdv/{{dataset}}/{proxy}/{victim}/{kind}/{{model}}{suffix}"
        for proxy, victim in cdv_group_cells()
    ]


def cdv_eval_group_inputs(wildcards):
    """Every cell's questions (its experiment's sample) and perturbed questions (and baselines when enabled)."""
    inputs = {}
    for i, (proxy, victim) in enumerate(cdv_group_cells()):
        cell = cdv_cell_dir(wildcards.dataset, proxy, victim)
        spec = SimpleNamespace(dataset=wildcards.dataset, proxy=proxy, victim=victim)
        inputs[f"questions_{i}"] = cdv_cell_questions(spec)
        inputs[f"perturbed_{i}"] = f"{cell}/perturbed.jsonl"
        if config["cdv"]["baselines"]["enabled"]:
            inputs[f"baselines_{i}"] = f"{cell}/baselines.jsonl"
    return inputs


def cdv_eval_temperature(model):
    """The evaluation temperature of one model: `cdv.eval.temperature` unless its API needs its own."""
    evaluation = config["cdv"]["eval"]
    return evaluation["model_temperature"].get(model, evaluation["temperature"])


def cdv_value_variants():
    return config["cdv"]["value_variants"]


def cdv_variant_files(name):
    """One file per (cell, value-function variant) of the ablation; the default variant is the cell's own."""
    return [
        f"{cdv_cell_dir(*cell)}/value/{variant}/{name}"
        for cell in cdv_cells()
        for variant in cdv_value_variants()
    ]


def cdv_classifier_roles():
    """Models of the post-hoc classifier job: the prompt classifier's model per victim, and the study's
    prompt-based classifiers."""
    classifier = config["cdv"]["classifier"]
    names = set(classifier["prompt_models"])
    if classifier["kind"] == "prompt":
        names |= {classifier["model"] or v for _, _, v in cdv_label_cells()}
    return sorted(names)


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


def cdv_dataset_pattern():
    """A regex of exactly the configured dataset names (so `MMLU.selected` or `n100/MMLU` are not one)."""
    return "|".join(re.escape(d) for d in cdv_datasets()) or "(?!)"


def cdv_experiment_samples():
    """Experiment name -> n, for the tables that keep an experiment's own sample."""
    return {name: e["n"] for name, e in sorted(config["cdv"]["experiments"].items())}


CDV_TABLES = ["cdv_search", "cdv_accuracy"]
CDV_FIGURES = ["cdv_matrix", "cdv_distribution", "cdv_agreement", "cdv_depth"]


def cdv_table_names():
    names = list(CDV_TABLES)
    if cdv_value_variants():
        names.append("cdv_value_ablation")
    if config["cdv"]["baselines"]["enabled"]:
        names.append("cdv_baselines")
    if config["cdv"]["mitigation"]["enabled"]:
        names.append("cdv_mitigation")
    if config["cdv"]["classifier"]["kind"] != "none":
        names.append("cdv_classifier")
    if config["cdv"]["classifier"]["prompt_models"]:
        names.append("cdv_classifier_study")
    if cdv_cost_study():
        names.append("cdv_filter_cost")
    if config["cdv"]["experiments"]:
        names.append("cdv_experiments")
    if config["cdv"]["dpo"]["train"]:
        names.append("cdv_dpo")
    if config["cdv"]["paper_values"]:
        names.append("cdv_vs_paper")
    return names


def cdv_outputs():
    """The CDV study's tables and figures (and the DPO pairs when exported); nothing without cells."""
    if not cdv_cells():
        return []
    outputs = [
        f"results/tables/{n}.{ext}"
        for n in cdv_table_names()
        for ext in ("csv", "md", "tex")
    ]
    outputs += [
        f"results/figures/{n}.{ext}" for n in CDV_FIGURES for ext in ("png", "pdf")
    ]
    # Figures 2/6 and 5, drawn from the study tables when those are built.
    outputs += [
        f"results/figures/{n}.{ext}"
        for n in ("cdv_experiments", "cdv_classifier_study")
        if n in cdv_table_names()
        for ext in ("png", "pdf")
    ]
    if config["cdv"]["dpo"]["export"]:
        outputs += ["results/cdv/dpo/train.jsonl", "results/cdv/dpo/test.jsonl"]
    if config["cdv"]["dpo"]["train"]:
        outputs += ["results/cdv/dpo/model/done.json"]
    return outputs


def cdv_cell_prices():
    """Price of every model that some cell's search runs under some role (the classifier job's cost
    columns): as a param, editing an unrelated model's price reruns nothing."""
    cells = cdv_cells() + cdv_cost_cells()
    names = {name for _, p, v in cells for name in cell_roles(p, v).values()}
    return {name: config["models"][name].get("price", {}) for name in sorted(names)}


# ---- cost ----


def cost_judging_datasets():
    return judging_datasets() if judging_enabled() else []


def cost_persona_sources():
    """Persona sources whose retrieved roles are judged (their selection tables enter the estimate)."""
    sources = {condition.split("/")[0] for condition in judging_conditions()}
    return sorted(source for source in sources if _judging.is_retrieved(source))


def cost_inputs(wildcards):
    """What the estimate reads: each dataset's pairs, topics and persona tables, and the prompt templates.

    Not the summaries: building them costs money, so the estimate reads them only if a run wrote them.
    """
    inputs = {
        "judge_template": judge_template(),
        "summary_template": config["judging"]["summary_prompt"],
    }
    for dataset in cost_judging_datasets():
        inputs[f"{dataset}_pairs"] = f"results/data/{dataset}/pairs.jsonl"
        inputs[f"{dataset}_topics"] = f"results/data/{dataset}/topics.tsv"
        for source in cost_persona_sources():
            table = f"results/judging/{dataset}/personas/{source}.jsonl"
            inputs[f"{dataset}_{source}"] = table
    for dataset in cost_cdv_datasets():
        inputs[f"cdv_{dataset}"] = f"results/cdv/data/{dataset}.jsonl"
    return inputs


def cost_cdv_datasets():
    enabled = cdv_enabled() and cdv_cell_specs()
    return cdv_datasets() if enabled else []


def cost_cdv_cells():
    """Each CDV search cell with its role models and evaluated models."""
    datasets = cost_cdv_datasets()
    return [
        {
            "dataset": dataset,
            "roles": cell_roles(proxy, victim),
            "eval_models": cdv_eval_models(victim, proxy),
            # The cell's nested subsample of the dataset's questions (n, seed).
            "n": cdv_cell_n(proxy, victim),
            "seed": config["seed"],
        }
        for dataset, proxy, victim in cdv_cells()
        if dataset in datasets
    ]


# ---- cdv: the paper's experiments (tables of stressprobe.cdv.paper_report) ----

CDV_STUDY_TABLES = [
    "cdv_experiments",
    "cdv_classifier_study",
    "cdv_filter_cost",
    "cdv_dpo",
    "cdv_vs_paper",
]


def cdv_lora_models():
    """File name -> Hugging Face id of the LoRA classifiers (none unless `classifier.lora.enabled`)."""
    lora = config["cdv"]["classifier"]["lora"]
    if not lora["enabled"]:
        return {}
    return {_cdv_experiments.file_name(model): model for model in lora["base_models"]}


def cdv_study_inputs(name):
    """What each study table reads; cdv_vs_paper reads every one the config turns on."""
    classifier = config["cdv"]["classifier"]
    parts = {
        "cdv_experiments": (
            {
                "evals": cdv_eval_files("eval"),
                "questions": expand(
                    "results/cdv/data/{dataset}.jsonl", dataset=cdv_datasets()
                ),
            }
            if config["cdv"]["experiments"]
            else {}
        ),
        "cdv_classifier_study": (
            {
                "classifier": "results/cdv/classifier/metrics.json",
                "lora": [
                    f"results/cdv/classifier/lora/{f}.json" for f in cdv_lora_models()
                ],
            }
            if classifier["prompt_models"]
            else {}
        ),
        "cdv_filter_cost": (
            {
                "cost_summaries": [
                    f"{cdv_cell_dir(*cell)}/search.summary.json"
                    for cell in cdv_cost_cells()
                ]
            }
            if cdv_cost_study()
            else {}
        ),
        "cdv_dpo": (
            {"dpo": "results/cdv/dpo/model/done.json"}
            if config["cdv"]["dpo"]["train"]
            else {}
        ),
    }
    if name != "cdv_vs_paper":
        return parts[name]
    merged = {
        "paper_values": config["cdv"]["paper_values"],
        "all_evals": cdv_eval_files("eval"),
    }
    if config["cdv"]["mitigation"]["enabled"]:
        merged["mitigation"] = cdv_eval_files("mitigation")
    for part in parts.values():
        merged.update(part)
    return merged
