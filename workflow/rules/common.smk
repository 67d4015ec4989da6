# What every stage uses: config validation, the writable-outputs check, the model registry, the resources
# of a job that calls models, and the final outputs. Each stage's own input functions live in its .smk.
import re
import sys
from pathlib import Path

from stressprobe.config import validate_config
from stressprobe.errors import StressprobeError
from stressprobe.io import output_path_problem
from stressprobe.llm import answer_prefill
from stressprobe.preflight import (
    models_in_use,
    report_and_stop,
    run_preflight,
    trained_base_models,
)


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


def calls_models(job):
    """Whether a job calls models: every such rule declares a `gpu` resource (llm_resources; 0 for API
    models), as do the GPU training rules, whose hub models the preflight checks too."""
    return "gpu" in job.rule.resources


# Runs after planning, before the first job (never on a dry run). Snakemake has no public hook for the
# jobs about to run; `workflow.dag` is its plan (checked in tests/test_faults.py on the pinned version).
onstart:
    stop_on_error(check_outputs_writable, workflow.dag.needrun_jobs())
    if config["preflight"]["before_run"] and any(
        map(calls_models, workflow.dag.needrun_jobs())
    ):
        # The preflight before the first job (config preflight.before_run): nothing is paid on a failure.
        # Runs that call no model (the bill, data preparation) go on: the bill shows the findings.
        stop_on_error(
            lambda: report_and_stop(
                run_preflight(
                    models_in_use(config),
                    config["models"],
                    config["preflight"]["run_days"],
                    trained=trained_base_models(config),
                    pools=preflight_pools(),
                    unpinned=config["personas"]["unpinned"],
                )
            )
        )


def _alternation(names):
    """A wildcard constraint matching exactly `names` (and nothing when there are none)."""
    return "|".join(re.escape(name) for name in names) or "(?!)"


def sorted_dict(value):
    """`value` with every dict's keys in sorted order: params compare by their text, so key order in a
    config file must not matter."""
    if isinstance(value, dict):
        return {key: sorted_dict(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sorted_dict(item) for item in value]
    return value


# ---- tables and figures: every one is declared the same way in both studies ----


# Only the pool jobs read how pools are embedded (device, chunk size): the other embedding jobs get the rest,
# so that editing those keys reruns the pools alone.
POOL_ONLY_EMBEDDING = ("pool_device", "pool_chunk")


def embedding_settings():
    """config["embedding"] without the pool jobs' own keys."""
    return {
        key: value
        for key, value in config["embedding"].items()
        if key not in POOL_ONLY_EMBEDDING
    }


def table_outputs(name, caption, category, subcategory, key="table"):
    """A table's outputs: `{key}` (CSV, in the report with its caption), `{key}_md` and `{key}_tex`."""
    return {
        key: report(
            f"results/tables/{name}.csv",
            caption=f"../report/{caption}.rst",
            category=category,
            subcategory=subcategory,
        ),
        f"{key}_md": f"results/tables/{name}.md",
        f"{key}_tex": f"results/tables/{name}.tex",
    }


def figure_outputs(name, caption, category, subcategory):
    """A figure's outputs: `png` (in the report with its caption) and `pdf`."""
    return {
        "png": report(
            f"results/figures/{name}.png",
            caption=f"../report/{caption}.rst",
            category=category,
            subcategory=subcategory,
        ),
        "pdf": f"results/figures/{name}.pdf",
    }


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


def model_prefill(name, prefix):
    """The start of the answer this model is prefilled with (its entry's `answer_prefill`), or None."""
    return answer_prefill(config["models"][name], prefix)


# ---- a job that calls models ----
# `models` is a function of a job's wildcards returning the model names it calls (None: no model). Rules use
# the three together: `conda: llm_env(models)`, `threads: llm_threads(models)`, `resources: **llm_resources(models)`.


def cell_model(wildcards):
    """The one model of a job whose `{model}` wildcard names it."""
    return [wildcards.model]


def _threads(name):
    entry = config["models"].get(name, {"backend": None})
    # The schema fills `n_threads` of every llamacpp entry; other backends wait on a server or a GPU.
    return entry["n_threads"] if entry["backend"] == "llamacpp" else 1


def _resource_family(names):
    """Memory and runtime: the `llm_gpu` family when any model runs on vllm, `llm` otherwise."""
    return config["resources"]["llm_gpu" if any(map(is_vllm, names)) else "llm"]


def llm_env(models):
    """The conda environment: the vLLM one on GPU nodes when any model runs on vllm, the CPU one otherwise."""
    return lambda w: (
        "../../envs/llm-gpu.yaml"
        if any(map(is_vllm, models(w)))
        else "../../envs/llm-cpu.yaml"
    )


def llm_threads(models):
    """CPU threads: llama.cpp's `n_threads` of the hungriest model, one otherwise."""
    return lambda w: max(map(_threads, models(w)), default=1)


def llm_resources(models, gpus=max):
    """GPUs of the largest vllm model (routed to the GPU partition by the profile), memory and runtime;
    `gpus=sum` for a job that holds all its vllm models at once."""
    return {
        "gpu": lambda w: gpus(map(model_resources, models(w))),
        "mem_mb": lambda w: _resource_family(models(w))["mem_mb"],
        "runtime": lambda w: _resource_family(models(w))["runtime"],
    }
