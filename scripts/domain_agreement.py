"""The automatic query->domain assignment beside each user-given mapping file, and their agreement."""

from functools import cache

from stressprobe.embedding import load_embedder
from stressprobe.persona import domain_agreement
from stressprobe.persona.data import read_topics
from stressprobe.snakemake_io import run_script
from stressprobe.tables import stem


def main(smk):
    @cache
    def embedder():  # one model for every dataset of the job
        settings = smk.params.embedding
        return load_embedder(
            settings["model"], settings["batch_size"], threads=smk.threads, sha256=settings.get("sha256")
        )

    def embed(texts):
        return embedder().embed(texts)

    results = {
        dataset: domain_agreement.dataset_agreement(read_topics(topics), mapping, smk.input.taxonomy, embed)
        for dataset, topics, mapping in zip(
            smk.params.datasets, smk.input.topics, smk.input.mappings, strict=True
        )
    }
    domain_agreement.write_agreement(
        results, smk.output.json, stem(smk.output.table), stem(smk.output.confusion)
    )


run_script(main, snakemake)  # noqa: F821
