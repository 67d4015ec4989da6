"""Prepare one judging dataset: selected topics, human qrels of the judged pairs, pairs, normalised runs."""

import logging
from pathlib import Path

from stressprobe.io import atomic_write, write_jsonl
from stressprobe.persona.data import (
    format_qrels,
    format_run,
    format_run_metadata,
    format_topics,
    load_source,
    read_run_metadata,
    read_runs_dir,
)
from stressprobe.persona.pins import check_pinned, check_systems, pinned_queries
from stressprobe.persona.selection import prepare_dataset
from stressprobe.snakemake_io import run_script

log = logging.getLogger("stressprobe")


def main(smk):
    entry, key = smk.params.dataset, f"judging.datasets.{smk.wildcards.dataset}"
    metadata_path = getattr(smk.input, "run_metadata", None)
    runs = read_runs_dir(smk.input.runs)
    prepared = prepare_dataset(
        load_source(entry, key, title=entry["title"]),
        runs,
        queries=pinned_queries(smk.wildcards.dataset, entry["queries"], entry["expect"]),
        max_passages_per_query=entry["max_passages_per_query"],
        unjudged_top_k_depth=entry["unjudged_top_k"],
        seed=smk.params.seed,
        key=key,
        run_metadata=read_run_metadata(metadata_path) if metadata_path else None,
    )
    # The paper's pinned inputs (expect/accept) are checked before any output exists, so no model is called.
    accepted = check_pinned(
        smk.wildcards.dataset, entry["expect"], entry["accept"], list(prepared.topics), prepared.qrels, runs
    )
    for difference in accepted:
        log.warning("accepted on purpose (%s.accept): %s", key, difference)
    # Table 7's systems must name runs of the dataset (run files named as the entries expect), before any call.
    # Read from the config, not params: as a param, editing Table 7's list would rerun every judge job.
    representative = smk.config["analysis"]["representative_systems"].get(smk.wildcards.dataset, [])
    check_systems(smk.wildcards.dataset, representative, runs)
    atomic_write(smk.output.topics, format_topics(prepared.topics))
    atomic_write(smk.output.qrels, format_qrels(prepared.qrels))
    write_jsonl(smk.output.pairs, prepared.pairs)
    runs_dir = Path(smk.output.runs)
    runs_dir.mkdir(parents=True, exist_ok=True)
    for name, run in prepared.runs.items():
        atomic_write(runs_dir / f"{name}.run", format_run(name, run))
    atomic_write(smk.output.run_names, "".join(f"{name}\n" for name in prepared.runs))
    atomic_write(smk.output.run_metadata, format_run_metadata(prepared.run_metadata))
    log.info(
        "%d queries, %d pairs (%d judged), %d runs; warnings: %s",
        len(prepared.topics),
        len(prepared.pairs),
        sum(len(d) for d in prepared.qrels.values()),
        len(prepared.runs),
        prepared.warnings,
    )


run_script(main, snakemake)  # noqa: F821
