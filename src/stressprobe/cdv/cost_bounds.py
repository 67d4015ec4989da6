"""Upper bounds of the CDV study's calls for the bill (stressprobe.cost): every allowed expansion happens,
every question grows to the longest allowed, the cache is not consulted; and the requests fixed before any
answer (each search's victim calls on the originals, each originals job's asks) for the overlap count.

The prompts are those the jobs send (`prompts`: the project's own, or the template file's); answers read
by a second call are counted at the extraction model's price (`cdv.prompts.extract_model`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from stressprobe.cdv.answers import EXTRACT_MAX_TOKENS, extraction_model
from stressprobe.cdv.experiments import nested_sample
from stressprobe.cdv.prompt_file import OWN
from stressprobe.cdv.search import expansion_bound
from stressprobe.cost import CellEstimate, bound_row
from stressprobe.llm import Request, answer_prefill
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.cache import cache_key
from stressprobe.overlap import Ask

Bound = list[tuple[Request, int]]


def longest_question(item: Mapping[str, Any], length_ratio_max: float) -> str:
    """The longest perturbed question the search keeps: added context up to the length bound."""
    question = item["question"]
    return question.rjust(int(len(question) * length_ratio_max))


def extraction_bound(
    prompts: Any,
    item: Mapping[str, Any],
    asked: tuple,
    answer_tokens: int,
    cdv: Mapping[str, Any],
    times: int,
) -> Bound:
    """With `cdv.prompts.extract_answers`, the calls that read answers to `asked` (the answering request's
    messages): `times` requests, each reading the longest answer (`answer_tokens`); with the project's own
    prompts (no extraction template) bounded by the question's own prompt plus that answer."""
    if not cdv.get("prompts", {}).get("extract_answers"):
        return []
    answer = "x " * answer_tokens
    if prompts.extracts:
        messages = prompts.extract(item["question"], item["choices"], answer)
    else:
        messages = (*asked, ("assistant", answer))
    return [(Request(messages=messages, max_tokens=EXTRACT_MAX_TOKENS), times)]


def successes(search: Mapping[str, Any], item: Mapping[str, Any]) -> int:
    """The most evaluated questions of one question's search: one with `evaluated: first_success`; under the
    authors' limits `max_candidates` - 1 found before the last expansion plus what that expansion adds (at
    most one per child, and the diversity limit n1; the limit is checked after each expansion); else every
    child the search may create. At least one: an original the victim already fails may be evaluated
    (`failed_originals: include`)."""
    per_expansion = len(item["choices"]) - 1
    children = expansion_bound(search, len(item["choices"])) * per_expansion
    if search.get("evaluated") == "first_success":
        return 1
    cap = search.get("max_candidates") if search.get("limits") == "authors_code" else None
    if cap is not None:
        children = min(children, cap - 1 + min(per_expansion, search.get("diversity_n1", 3)))
    return max(1, children)


def eval_max_tokens(cdv: Mapping[str, Any], model: str) -> int:
    """An evaluated model's answer limit (cdv.eval.model_max_tokens, else cdv.eval.max_tokens)."""
    evaluation = cdv["eval"]
    return evaluation.get("model_max_tokens", {}).get(model, evaluation["max_tokens"])


def _rows(
    dataset: str, cell: str, named: Mapping[str, tuple[str, Bound]], models: Mapping[str, Mapping[str, Any]]
) -> list[CellEstimate]:
    """One bound row per role that has requests: (model, requests) by role."""
    return [
        bound_row(dataset, f"{cell} ({role})" if role else cell, model, models[model], requests)
        for role, (model, requests) in named.items()
        if requests
    ]


def cdv_search_bounds(
    dataset: str,
    questions: Sequence[Mapping[str, Any]],
    roles: Mapping[str, str],
    cdv: Mapping[str, Any],
    models: Mapping[str, Mapping[str, Any]],
    asks: list[Ask] | None = None,
    job: str = "",
    prompts: Any = OWN,
) -> list[CellEstimate]:
    """Upper bounds of one search cell's calls per role (proxy, semantic check, victim, extraction); the
    victim's calls on the original questions go to `asks` as job `job` (the cell, or one of its variants).

    Per question with k choices: the root's sampled victim call, then per expansion (at most
    `expansion_bound`) k - 1 children, each up to `proxy_tries` proxy calls and semantic checks and a sampled
    victim call; with the greedy audit, one greedy victim call per node that may succeed.
    """
    search = cdv["search"]
    victim = roles["victim"]
    victim_prefill = answer_prefill(models[victim], cdv["answer_prefix"])
    cell = f"search {roles['proxy']}/{victim}"
    extractor = roles.get("extract") or extraction_model(cdv.get("prompts", {}), victim) or victim
    per_role: dict[str, Bound] = {"proxy": [], "semantic": [], "victim": [], "extract": []}
    for item in questions:
        choices, answer = item["choices"], item["answer_index"]
        children = expansion_bound(search, len(choices)) * (len(choices) - 1)
        tries = search.get("proxy_tries", 3)
        greedy_calls = 1 if search.get("greedy_audit", False) else 0
        longest = longest_question(item, search["length_ratio_max"])
        target = next(i for i in range(len(choices)) if i != answer)
        proxy = prompts.proxy(longest, choices, answer, target, item["question"])
        semantic = prompts.semantic(item["question"], longest, choices, answer)
        per_role["proxy"].append(
            (Request(messages=proxy, max_tokens=search["proxy_max_tokens"]), children * tries)
        )
        per_role["semantic"].append(
            (Request(messages=semantic, max_tokens=search["semantic_max_tokens"]), children * tries)
        )
        for kind, (question, times) in enumerate(((item["question"], 1), (longest, children))):
            messages = prompts.victim(question, choices, prefill=victim_prefill)
            sampled = Request(messages=messages, max_tokens=search["victim_max_tokens"], n=search["samples"])
            greedy = Request(messages=messages, max_tokens=search["victim_max_tokens"])
            per_role["victim"] += [(sampled, times), (greedy, times * greedy_calls)]
            read = times * (search["samples"] + greedy_calls)
            per_role["extract"] += extraction_bound(
                prompts, {**item, "question": question}, messages, search["victim_max_tokens"], cdv, read
            )
            if asks is not None and kind == 0:  # the original: fixed before any answer
                identity = backend_identity(victim, models[victim])
                asks += [
                    Ask("cdv_search", victim, job or f"{dataset} {cell}", cache_key(identity, r))
                    for r in [sampled, greedy][: 1 + greedy_calls]
                ]
    named = {role: (roles[role], per_role[role]) for role in ("proxy", "semantic", "victim")}
    return _rows(dataset, cell, {**named, "extract": (extractor, per_role["extract"])}, models)


def _answer_bounds(
    items: Iterable[tuple[Mapping[str, Any], str, int, bool]],
    model: str,
    cdv: Mapping[str, Any],
    models: Mapping[str, Mapping[str, Any]],
    prompts: Any,
) -> tuple[Bound, Bound, list[tuple[Request, bool]]]:
    """The evaluated model's requests for (item, question asked, times, mitigated), their extraction
    calls, and each answering request with its mitigation flag (for the overlap's asks)."""
    prefill = answer_prefill(models[model], cdv["answer_prefix"])
    max_tokens = eval_max_tokens(cdv, model)
    answering, extracting, asked = [], [], []
    for item, question, times, mitigated in items:
        messages = prompts.victim(question, item["choices"], mitigated, prefill)
        request = Request(messages=messages, max_tokens=max_tokens)
        answering.append((request, times))
        extracting += extraction_bound(
            prompts, {**item, "question": question}, messages, max_tokens, cdv, times
        )
        asked.append((request, mitigated))
    return answering, extracting, asked


def _kinds(cdv: Mapping[str, Any]) -> list[bool]:
    """The evaluation's settings: plain, and with mitigation on also under the focus instruction."""
    return [False, True] if cdv["mitigation"]["enabled"] else [False]


def cdv_eval_bounds(
    dataset: str,
    questions: Sequence[Mapping[str, Any]],
    cell: str,
    eval_models: Sequence[str],
    cdv: Mapping[str, Any],
    models: Mapping[str, Mapping[str, Any]],
    prompts: Any = OWN,
) -> list[CellEstimate]:
    """Upper bounds of asking each evaluated model every possible success of a cell (`successes`; its
    originals are asked once per dataset: `cdv_originals_bounds`); with mitigation on, each is asked a
    second time with the focus instruction.
    """
    search = cdv["search"]
    rows = []
    for model in eval_models:
        items = []
        for item in questions:
            longest = longest_question(item, search["length_ratio_max"])
            items += [(item, longest, successes(search, item), mitigated) for mitigated in _kinds(cdv)]
        answering, extracting, _ = _answer_bounds(items, model, cdv, models, prompts)
        extractor = extraction_model(cdv.get("prompts", {}), model) or model
        named = {"": (model, answering), "extract": (extractor, extracting)}
        rows += _rows(dataset, f"eval {cell}", named, models)
    return rows


def cdv_originals_bounds(
    dataset: str,
    questions: Sequence[Mapping[str, Any]],
    model: str,
    cdv: Mapping[str, Any],
    models: Mapping[str, Mapping[str, Any]],
    asks: list[Ask] | None = None,
    prompts: Any = OWN,
) -> list[CellEstimate]:
    """The originals of a dataset asked of one evaluated model once (rule cdv_eval_originals, or a grouped
    vLLM evaluation: one job per dataset and model), per setting; their asks go to `asks`."""
    items = [(item, item["question"], 1, mitigated) for mitigated in _kinds(cdv) for item in questions]
    answering, extracting, asked = _answer_bounds(items, model, cdv, models, prompts)
    if asks is not None:
        identity = backend_identity(model, models[model])
        for request, mitigated in asked:
            job = f"{dataset} originals {'mitigation' if mitigated else 'eval'} {model}"
            asks.append(Ask("cdv_eval", model, job, cache_key(identity, request)))
    extractor = extraction_model(cdv.get("prompts", {}), model) or model
    return _rows(
        dataset, "eval originals", {"": (model, answering), "extract": (extractor, extracting)}, models
    )


def cdv_estimates(
    cells: Sequence[Mapping[str, Any]],
    questions_of: Mapping[str, Sequence[Mapping[str, Any]]],
    cdv: Mapping[str, Any],
    models: Mapping[str, Mapping[str, Any]],
    asks: list[Ask] | None = None,
    prompts: Any = OWN,
) -> list[CellEstimate]:
    """The bound rows of every CDV cell (`cost_cdv_cells()`): its search, once more per value-function
    variant, and its evaluations' successes; then per dataset and evaluated model the originals, asked once
    for all its cells (the union of their samples). `questions_of` maps a dataset to its questions."""
    rows = []
    originals: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = {}
    for cell in cells:
        dataset, roles = cell["dataset"], cell["roles"]
        questions = nested_sample(list(questions_of[dataset]), cell.get("n"), cell.get("seed", 0))
        name = f"{roles['proxy']}/{roles['victim']}"
        rows += cdv_search_bounds(dataset, questions, roles, cdv, models, asks, prompts=prompts)
        # The value-function ablation searches the cell once more per variant, with the same bound (on the
        # cost experiment's random questions it is not bounded, as that experiment is not).
        ablated = cdv["value_variant_cells"] == "study"
        for variant in cdv["value_variants"] if ablated else []:
            job = f"{dataset} search {name} [{variant}]"
            variant_rows = cdv_search_bounds(dataset, questions, roles, cdv, models, asks, job, prompts)
            rows += [dataclasses.replace(row, cell=f"{row.cell} [{variant}]") for row in variant_rows]
        rows += cdv_eval_bounds(dataset, questions, name, cell["eval_models"], cdv, models, prompts)
        for model in cell["eval_models"]:
            union = originals.setdefault((dataset, model), {})
            union.update({q["question"]: q for q in questions if q["question"] not in union})
    for (dataset, model), union in originals.items():
        rows += cdv_originals_bounds(dataset, list(union.values()), model, cdv, models, asks, prompts)
    return rows


def cdv_benchmark_bounds(
    name: str,
    items: Sequence[tuple[Mapping[str, Any], int]],
    eval_models: Sequence[str],
    cdv: Mapping[str, Any],
    models: Mapping[str, Mapping[str, Any]],
) -> list[CellEstimate]:
    """Rule cdv_benchmark: each model asked every (question, times) of benchmark `name` once, with the
    project's own prompts and the answer line read (as the rule asks), at the model's token limit."""
    rows = []
    for model in eval_models:
        prefill = answer_prefill(models[model], cdv["answer_prefix"])
        requests = [
            (Request(messages=OWN.victim(item["question"], item["choices"], prefill=prefill),
                     max_tokens=eval_max_tokens(cdv, model)), times)
            for item, times in items
        ]  # fmt: skip
        rows.append(bound_row("benchmark", f"benchmark {name}", model, models[model], requests))
    return rows


def heldout_bound(
    cells: Sequence[Mapping[str, Any]],
    questions_of: Mapping[str, Sequence[Mapping[str, Any]]],
    cdv: Mapping[str, Any],
) -> list[tuple[Mapping[str, Any], int]]:
    """An upper bound of the DPO held-out split (written by the searches, so unknown before them): every
    possible success of every cell, each at the longest question (the split keeps a share of them)."""
    search = cdv["search"]
    items = []
    for cell in cells:
        questions = nested_sample(list(questions_of[cell["dataset"]]), cell.get("n"), cell.get("seed", 0))
        for item in questions:
            longest = longest_question(item, search["length_ratio_max"])
            items.append(({**item, "question": longest}, successes(search, item)))
    return items


def cdv_benchmark_estimates(
    files: Mapping[str, Sequence[Mapping[str, Any]] | None],
    evaluated: Mapping[str, Sequence[str]],
    cells: Sequence[Mapping[str, Any]],
    questions_of: Mapping[str, Sequence[Mapping[str, Any]]],
    cdv: Mapping[str, Any],
    models: Mapping[str, Mapping[str, Any]],
) -> list[CellEstimate]:
    """The bound rows of every benchmark (`files`: name -> its questions, None for the DPO held-out split,
    bounded from the cells by `heldout_bound`), for the models `evaluated` on each."""
    rows = []
    for name, questions in files.items():
        items = heldout_bound(cells, questions_of, cdv) if questions is None else [(q, 1) for q in questions]
        rows += cdv_benchmark_bounds(name, items, evaluated[name], cdv, models)
    return rows
