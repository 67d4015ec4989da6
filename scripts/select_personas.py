"""Retrieve the query, domain and orthogonal personas of every query of a dataset from one pool."""

from stressprobe.embedding import load_embedder, load_vectors
from stressprobe.io import iter_jsonl, write_jsonl
from stressprobe.persona.data import read_topics
from stressprobe.persona.pool_build import read_pool_entries
from stressprobe.persona.pools import domain_texts, read_domain_mapping, read_taxonomy, retrieve, role_records
from stressprobe.snakemake_io import run_script


def main(smk):
    # The pool (up to a million rows) is never read whole: its vectors are memory-mapped, and only the
    # retrieved entries are read back.
    rows = sum(1 for _ in iter_jsonl(smk.input.pool))
    pool_vectors = load_vectors(smk.input.embeddings, rows, mmap=True)
    topics = read_topics(smk.input.topics)
    query_domains = read_domain_mapping(smk.input.domains, topics, known=None)
    # The workflow passes the taxonomy only when the file exists.
    taxonomy_path = getattr(smk.input, "taxonomy", None)
    taxonomy = read_taxonomy(taxonomy_path) if taxonomy_path else None
    texts = domain_texts(query_domains.values(), taxonomy)
    embedder = load_embedder(
        smk.params.embedding["model"],
        smk.params.embedding["batch_size"],
        threads=smk.threads,
        sha256=smk.params.embedding.get("sha256"),
    )
    qids = list(topics)
    ranked = retrieve(
        qids,
        embedder.embed([topics[q] for q in qids]),
        query_domains,
        dict(zip(texts, embedder.embed(list(texts.values())), strict=True)),
        pool_vectors,
        k=smk.params.candidates,
        orthogonal=smk.params.orthogonal,
    )
    pool = read_pool_entries(smk.input.pool, {j for found in ranked.values() for j, _ in found})
    write_jsonl(smk.output[0], role_records(qids, ranked, pool))


run_script(main, snakemake)  # noqa: F821
