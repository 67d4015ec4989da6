"""Build a persona pool (`{"pid","text"}` per persona) and embed it once for every dataset to reuse: the
records streamed, embedded in resumable chunks (stressprobe.persona.pool_build)."""

import logging
import shutil

from stressprobe.embedding import load_embedder
from stressprobe.persona.pool_build import assemble, embed_in_chunks
from stressprobe.persona.pools import iter_pool, load_pool_records, pool_fingerprint
from stressprobe.snakemake_io import run_script

log = logging.getLogger("stressprobe")


def main(smk):
    source, key, embedding = (
        smk.params.source,
        f"personas.sources.{smk.wildcards.source}",
        smk.params.embedding,
    )
    origin = source["path"] or f"{source['hf_dataset']} ({key})"
    embedder = load_embedder(
        embedding["model"],
        embedding["batch_size"],
        threads=smk.threads,
        device=embedding["pool_device"],
        sha256=embedding.get("sha256"),
    )
    chunks = embed_in_chunks(
        iter_pool(load_pool_records(source, key), source["kind"], origin, source["period"]),
        smk.params.chunks,
        embedding["pool_chunk"],
        embedder.embed,
        pool_fingerprint(source, embedding),
    )
    rows = assemble(smk.params.chunks, chunks, smk.output.pool, smk.output.embeddings)
    shutil.rmtree(smk.params.chunks)
    log.info("%s: %d personas embedded in %d chunks", key, rows, chunks)


run_script(main, snakemake)  # noqa: F821
