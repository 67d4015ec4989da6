"""Build a persona pool (`{"pid","text"}` per persona) and embed it once for every dataset to reuse."""

import logging

from stressprobe.embedding import load_embedder, save_vectors
from stressprobe.io import write_jsonl
from stressprobe.persona.pools import build_pool, load_pool_records
from stressprobe.snakemake_io import run_script

log = logging.getLogger("stressprobe")


def main(smk):
    source, key = smk.params.source, f"personas.sources.{smk.wildcards.source}"
    origin = source["path"] or f"{source['hf_dataset']} ({key})"
    pool = build_pool(load_pool_records(source, key), source["kind"], origin)
    embedder = load_embedder(
        smk.params.embedding["model"], smk.params.embedding["batch_size"], threads=smk.threads
    )
    vectors = embedder.embed([p["text"] for p in pool])
    write_jsonl(smk.output.pool, pool)
    save_vectors(smk.output.embeddings, vectors)
    log.info("%s: %d personas embedded (dimension %d)", key, len(pool), vectors.shape[1])


run_script(main, snakemake)  # noqa: F821
