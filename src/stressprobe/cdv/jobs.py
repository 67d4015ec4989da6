"""What a CDV job does with its models, whichever rule runs it: one cell's tree search (rules cdv_search and
cdv_vllm_served) and one model's evaluation on every cell of a dataset (rules cdv_eval_vllm and
cdv_vllm_served). The scripts only adapt the `snakemake` object to these."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stressprobe.cdv.classifier import prompt_probabilities
from stressprobe.cdv.clients import role_clients, write_merged_usage
from stressprobe.cdv.evaluate import cell_originals, eval_items, evaluate, evaluate_parts, union_questions
from stressprobe.cdv.prompt_file import OWN, prompt_set
from stressprobe.cdv.search import (
    SearchSettings,
    perturbed_records,
    run_search,
    search_records,
    summarize_search,
)
from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.llm.usage import Usage, effective_price

log = logging.getLogger("stressprobe.cdv")


@dataclass(frozen=True)
class SearchFiles:
    """A search cell's outputs."""

    search: str
    perturbed: str
    summary: str
    usage: str


def job_prompts(spec: Mapping[str, Any]) -> Any:
    """The prompt set of a job from its `prompts` param (cdv.prompts, its template file resolved)."""
    return prompt_set(
        spec["file"],
        spec["templates"],
        spec["extract_answers"],
        "cdv.prompts.templates",
        spec["distraction"],
        spec["distraction_position"],
        spec.get("system"),
    )


def search_settings(
    search: Mapping[str, Any],
    classifier_threshold: float,
    seed: int,
    victim_prefill: str | None,
    eval_temperature: float,
    value: str,
    prompts: Mapping[str, Any],
) -> SearchSettings:
    """The SearchSettings of a cell from the rule's params."""
    return SearchSettings(
        **search,
        classifier_threshold=classifier_threshold,
        seed=seed,
        victim_prefill=victim_prefill,
        eval_temperature=eval_temperature,
        value=value,
        extract_temperature=prompts.get("extract_temperature", 0.0),
        prompts=job_prompts(prompts),
    )


def search_cell(
    questions_path: str,
    models: Mapping[str, Any],
    roles: Mapping[str, str],
    cache_path: str,
    settings: SearchSettings,
    dataset: str,
    files: SearchFiles,
) -> None:
    """Search one (dataset, proxy, victim) cell and write its search, perturbed, summary and usage files."""
    questions = read_jsonl(questions_path)
    roles = dict(roles)
    with role_clients(dict(models), roles, cache_path) as clients:
        perturbability = None
        if "classifier" in clients:
            perturbability = prompt_probabilities(clients["classifier"], questions, settings.seed)
        states = run_search(questions, clients, settings, perturbability)
        write_merged_usage(clients, files.usage)
    records = search_records(states)
    # As billed: a `batch: true` model costs the batch price.
    prices = {role: effective_price(models[name]) for role, name in roles.items()}
    summary = {
        **roles,
        "dataset": dataset,
        "value": settings.value,
        **summarize_search(records, prices),
    }
    log.info(
        "search %s/%s/%s: %d questions, %d successful perturbations",
        dataset,
        roles["proxy"],
        roles["victim"],
        summary["questions"],
        summary["successful_perturbations"],
    )
    write_jsonl(files.search, records)
    write_jsonl(files.perturbed, perturbed_records(states, settings.evaluated, settings.failed_originals))
    write_json(files.summary, summary)


@dataclass(frozen=True)
class EvalCell:
    """One cell of a grouped evaluation: what it reads and what it writes (mitigation files: "" when off)."""

    name: str
    questions: str
    perturbed: str
    baselines: str
    records: str
    usage: str
    mitigation: str = ""
    mitigation_usage: str = ""


def group_cells(
    cells: list[tuple[str, str]] | list[list[str]],
    questions: list[str],
    perturbed: list[str],
    baselines: list[str],
    records: list[str],
    usage: list[str],
    mitigation: list[str] | tuple[()] = (),
    mitigation_usage: list[str] | tuple[()] = (),
) -> list[EvalCell]:
    """The EvalCells of (proxy, victim) `cells` from parallel lists of paths (mitigation: empty when off)."""
    mitigation = list(mitigation) or [""] * len(cells)
    mitigation_usage = list(mitigation_usage) or [""] * len(cells)
    columns = (cells, questions, perturbed, baselines, records, usage, mitigation, mitigation_usage)
    return [EvalCell("/".join(cell), *paths) for cell, *paths in zip(*columns, strict=True)]


@dataclass(frozen=True)
class EvalSettings:
    """How one model is asked in the evaluation (and who reads its answers when they are extracted)."""

    max_tokens: int
    temperature: float
    prefill: str | None
    seed: int
    prompts: Any = OWN
    extract_model: str | None = None  # None: the evaluated model reads its own answers
    extract_temperature: float = 0.0

    @classmethod
    def of(
        cls, max_tokens: int, temperature: float, prefill: str | None, seed: int, prompts: Mapping[str, Any]
    ) -> EvalSettings:
        """The settings of a job from its params (`prompts`: cdv.prompts, its template file resolved)."""
        return cls(
            max_tokens,
            temperature,
            prefill,
            seed,
            job_prompts(prompts),
            prompts.get("extract_model"),
            prompts.get("extract_temperature", 0.0),
        )

    def roles(self, model: str) -> dict[str, str]:
        """The job's role -> model: `eval`, and `extract` (the same client when the model reads its own)."""
        return {"eval": model, "extract": self.extract_model or model}


def _evaluate(clients: Mapping[str, Any], items: list[dict[str, Any]], mitigated: bool, s: EvalSettings):
    return evaluate(
        clients["eval"],
        items,
        s.max_tokens,
        s.seed,
        mitigated,
        s.prefill,
        s.temperature,
        s.prompts,
        clients["extract"],
        s.extract_temperature,
    )


def evaluate_originals(
    models: Mapping[str, Any],
    model: str,
    cache_path: str,
    question_files: list[str],
    settings: EvalSettings,
    mitigated: bool,
    outputs: tuple[str, str],
) -> None:
    """Rule cdv_eval_originals: ask `model` the original questions of every cell of a dataset once (the union
    of their nested samples) and write the records and usage that every cell's evaluation reads."""
    questions = union_questions([read_jsonl(path) for path in question_files], list(question_files))
    with role_clients(dict(models), settings.roles(model), cache_path) as clients:
        records = _evaluate(clients, eval_items(questions, [], []), mitigated, settings)
        write_merged_usage(clients, outputs[1])
    write_jsonl(outputs[0], records)


def evaluate_cell(
    models: Mapping[str, Any],
    model: str,
    cache_path: str,
    cell: EvalCell,
    originals: str,
    settings: EvalSettings,
    mitigated: bool,
) -> None:
    """Rules cdv_eval and cdv_mitigation: one cell's records, its originals picked from the dataset's shared
    file (`originals`; "": the dataset's one cell evaluating `model` asks them here), its perturbed
    questions (and, without mitigation, baselines) asked here; the records are those asking everything
    here would give, in the same order."""
    questions = read_jsonl(cell.questions)
    shared = cell_originals(read_jsonl(originals), questions, originals) if originals else []
    baselines = read_jsonl(cell.baselines) if cell.baselines else []
    items = eval_items(questions, read_jsonl(cell.perturbed), baselines, originals=not originals)
    with role_clients(dict(models), settings.roles(model), cache_path) as clients:
        records = shared + _evaluate(clients, items, mitigated, settings)
        write_merged_usage(clients, cell.usage)
    write_jsonl(cell.records, records)


def evaluate_group(
    models: Mapping[str, Any], model: str, cache_path: str, cells: list[EvalCell], settings: EvalSettings
) -> None:
    """Evaluate `model` on every cell with one client (one model load): per cell, the originals, perturbed
    questions and baselines, and with mitigation the originals and perturbed questions under the focus
    instruction; the same files as cdv_eval and cdv_mitigation write per cell. Every cell's requests go to
    the model in one call (an engine that batches sees the whole job), each answer committed to the cache
    as it returns. The job is the one owner of its (dataset, model)'s originals: a later cell's asks of
    them are this job's own hits, as the duplicates of one call are."""
    outputs = []
    for cell in cells:
        questions = read_jsonl(cell.questions)
        perturbed = read_jsonl(cell.perturbed)
        baselines = read_jsonl(cell.baselines) if cell.baselines else []
        outputs.append((False, eval_items(questions, perturbed, baselines), cell, cell.records, cell.usage))
        if cell.mitigation:
            # As cdv_mitigation: originals and perturbed questions only, no baselines.
            items = eval_items(questions, perturbed, [])
            outputs.append((True, items, cell, cell.mitigation, cell.mitigation_usage))
    s = settings
    with role_clients(dict(models), s.roles(model), cache_path) as clients:
        parts = evaluate_parts(
            clients["eval"],
            [(items, mitigated) for mitigated, items, *_ in outputs],
            s.max_tokens,
            s.seed,
            s.prefill,
            s.temperature,
            s.prompts,
            clients["extract"],
            s.extract_temperature,
        )
        for index, ((mitigated, _, cell, records_path, usage_path), part) in enumerate(
            zip(outputs, parts, strict=True)
        ):
            usage = {"eval": Usage.of(part.asked), "extract": Usage.of(part.extracted)}
            if index == 0:  # Retries are the job's, not a cell's: counted once, so sums stay right.
                usage["eval"].retries = clients["eval"].usage.retries
                if clients["extract"] is not clients["eval"]:
                    usage["extract"].retries = clients["extract"].usage.retries
            write_merged_usage(clients, usage_path, usage)
            write_jsonl(records_path, part.records)
            log.info("%s %s: %d records (mitigation %s)", model, cell.name, len(part.records), mitigated)


@dataclass(frozen=True)
class ServedSearch:
    """A search cell of the served dataset job: its roles, settings and files."""

    questions: str
    roles: Mapping[str, str]
    settings: SearchSettings
    files: SearchFiles


@dataclass(frozen=True)
class ServedEval:
    """A served model's grouped evaluation."""

    model: str
    cells: list[EvalCell]
    settings: EvalSettings


def served_dataset(
    models: Mapping[str, Any],
    served: list[str],
    cache_path: str,
    dataset: str,
    searches: list[ServedSearch],
    evaluations: list[ServedEval],
    log_prefix: str,
    seed: int,
) -> None:
    """The CDV dataset job of rule cdv_vllm_served: the `served` vLLM models resident side by side, each
    behind its own server, for the searches of the cells they take part in, then their evaluations on every
    cell of the dataset (which need those searches' perturbed questions)."""
    from stressprobe.llm.serving import serve_models

    with serve_models(models, served, log_prefix, seed) as entries:
        for search in searches:
            search_cell(
                search.questions, entries, search.roles, cache_path, search.settings, dataset, search.files
            )
        for evaluation in evaluations:
            evaluate_group(entries, evaluation.model, cache_path, evaluation.cells, evaluation.settings)
