"""Each selected query's taxonomy domain: from the dataset's mapping file, or by embedding similarity."""

from functools import cache

from stressprobe.embedding import load_embedder
from stressprobe.io import atomic_write
from stressprobe.persona.data import read_topics
from stressprobe.persona.pools import domains_for_queries, format_domains
from stressprobe.snakemake_io import run_script


def main(smk):
    # One model per job: domains_for_queries embeds twice (queries, then domains); none with a mapping file.
    @cache
    def embedder():
        settings = smk.params.embedding
        return load_embedder(
            settings["model"], settings["batch_size"], threads=smk.threads, sha256=settings.get("sha256")
        )

    def embed(texts):
        return embedder().embed(texts)

    mapping = domains_for_queries(
        smk.wildcards.dataset,
        read_topics(smk.input.topics),
        getattr(smk.input, "mapping", None),
        smk.params.taxonomy,
        embed,
    )
    atomic_write(smk.output[0], format_domains(mapping))


run_script(main, snakemake)  # noqa: F821
