"""The CDV tree search of one (dataset, proxy, victim) cell."""

import logging

from stressprobe.cdv.classifier import prompt_probabilities
from stressprobe.cdv.clients import role_clients, write_merged_usage
from stressprobe.cdv.search import (
    SearchSettings,
    perturbed_records,
    run_search,
    search_records,
    summarize_search,
)
from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.llm.usage import effective_price
from stressprobe.snakemake_io import cache_path, run_script

log = logging.getLogger("stressprobe.cdv")


def main(smk):
    questions = read_jsonl(smk.input.questions)
    settings = SearchSettings(
        **smk.params.search,
        classifier_threshold=smk.params.classifier_threshold,
        seed=smk.params.seed,
        victim_prefill=smk.params.victim_prefill,
        eval_temperature=smk.params.eval_temperature,
        value=smk.params.value,
    )
    roles = dict(smk.params.roles)
    with role_clients(smk.params.models, roles, cache_path(smk)) as clients:
        perturbability = None
        if "classifier" in clients:
            perturbability = prompt_probabilities(clients["classifier"], questions, smk.params.seed)
        states = run_search(questions, clients, settings, perturbability)
        write_merged_usage(clients, smk.output.usage)
    records = search_records(states)
    # As billed: a `batch: true` model costs the batch price.
    prices = {role: effective_price(smk.params.models[name]) for role, name in roles.items()}
    summary = {
        **roles,
        "dataset": smk.wildcards.dataset,
        "value": smk.params.value,
        **summarize_search(records, prices),
    }
    log.info(
        "search: %d questions, %d successful perturbations",
        summary["questions"],
        summary["successful_perturbations"],
    )
    write_jsonl(smk.output.search, records)
    write_jsonl(smk.output.perturbed, perturbed_records(states))
    write_json(smk.output.summary, summary)


run_script(main, snakemake)  # noqa: F821
