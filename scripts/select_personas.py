"""Retrieve the query, domain and orthogonal personas of every query of a dataset from one pool."""

from stressprobe.embedding import load_embedder, load_vectors
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.persona.data import read_topics
from stressprobe.persona.pools import domain_texts, read_domain_mapping, read_taxonomy, select_personas
from stressprobe.snakemake_io import run_script


def main(smk):
    pool = read_jsonl(smk.input.pool)
    pool_vectors = load_vectors(smk.input.embeddings, len(pool))
    topics = read_topics(smk.input.topics)
    query_domains = read_domain_mapping(smk.input.domains, topics, known=None)
    # The workflow passes the taxonomy only when the file exists.
    taxonomy_path = getattr(smk.input, "taxonomy", None)
    taxonomy = read_taxonomy(taxonomy_path) if taxonomy_path else None
    texts = domain_texts(query_domains.values(), taxonomy)
    embedder = load_embedder(
        smk.params.embedding["model"], smk.params.embedding["batch_size"], threads=smk.threads
    )
    qids = list(topics)
    records = select_personas(
        qids,
        embedder.embed([topics[q] for q in qids]),
        query_domains,
        dict(zip(texts, embedder.embed(list(texts.values())), strict=True)),
        pool,
        pool_vectors,
        k=smk.params.candidates,
        orthogonal=smk.params.orthogonal,
    )
    write_jsonl(smk.output[0], records)


run_script(main, snakemake)  # noqa: F821
