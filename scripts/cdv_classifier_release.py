"""Table 7 from the authors' released labels: the no-classifier baseline and the MiniLM classifier."""

from stressprobe.cdv.release import read_release_labels, release_study
from stressprobe.embedding import load_embedder
from stressprobe.io import write_json
from stressprobe.snakemake_io import run_script


def main(smk):
    embedding = smk.params.embedding
    embedder = load_embedder(embedding["model"], embedding["batch_size"], sha256=embedding.get("sha256"))
    train, test = read_release_labels(smk.input.train), read_release_labels(smk.input.test)
    write_json(smk.output[0], release_study(train, test, embedder.embed, smk.params.threshold))


run_script(main, snakemake)  # noqa: F821
