"""Build a persona pool (`{"pid","text"}` per persona) and embed it once for every dataset to reuse: the
records streamed, embedded in resumable chunks (stressprobe.persona.pool_build)."""

import logging
import shutil
import time

from stressprobe.embedding import load_embedder
from stressprobe.persona.pool_build import Budget, assemble, embed_in_chunks
from stressprobe.persona.pools import iter_pool, load_pool_records, pool_fingerprint, pool_size
from stressprobe.snakemake_io import run_script

log = logging.getLogger("stressprobe")


def main(smk):
    started = time.monotonic()
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
        iter_pool(
            load_pool_records(source, key, smk.params.unpinned), source["kind"], origin, source["period"]
        ),
        smk.params.chunks,
        embedding["pool_chunk"],
        embedder.embed,
        pool_fingerprint(source, embedding),
        # The job's own texts/s at its first chunk, against its runtime (resources.persona_pool.runtime).
        Budget(pool_size(source), smk.params.runtime * 60, started),
    )
    rows = assemble(smk.params.chunks, chunks, smk.output.pool, smk.output.embeddings)
    shutil.rmtree(smk.params.chunks)
    log.info("%s: %d personas embedded in %d chunks", key, rows, chunks)


run_script(main, snakemake)  # noqa: F821
