"""External judgments registered in config, as qrels of the dataset's selected queries."""

from stressprobe.io import atomic_write
from stressprobe.persona.data import format_qrels, read_qrels, read_topics
from stressprobe.persona.judging import restrict_external_qrels
from stressprobe.snakemake_io import run_script


def main(smk):
    qrels = restrict_external_qrels(
        read_qrels(smk.input.qrels), read_topics(smk.input.topics), smk.input.qrels
    )
    atomic_write(smk.output[0], format_qrels(qrels))


run_script(main, snakemake)  # noqa: F821
