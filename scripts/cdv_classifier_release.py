"""Table 7 from the authors' released labels: the no-classifier baseline, the MiniLM classifier and the
prompt classifiers of `cdv.classifier.prompt_models`, scored on the released 120 test labels."""

from stressprobe.cdv.classifier import prompt_probabilities
from stressprobe.cdv.clients import role_clients
from stressprobe.cdv.release import read_release_labels, release_study
from stressprobe.embedding import load_embedder
from stressprobe.io import write_json
from stressprobe.snakemake_io import cache_path, run_script


def main(smk):
    embedding = smk.params.embedding
    embedder = load_embedder(embedding["model"], embedding["batch_size"], sha256=embedding.get("sha256"))
    train, test = read_release_labels(smk.input.train), read_release_labels(smk.input.test)
    prompt_scores = {}
    for model in smk.params.prompt_models:
        with role_clients(smk.params.models, {"classifier": model}, cache_path(smk)) as clients:
            prompt_scores[model] = prompt_probabilities(clients["classifier"], test, smk.params.seed)
    result = release_study(train, test, embedder.embed, smk.params.threshold, prompt_scores)
    write_json(smk.output[0], result)


# A process that vLLM starts by spawn (its engine core, its workers) re-runs this file as `__mp_main__`,
# where Snakemake's `snakemake` object does not exist: only the job's own process runs the job.
if __name__ == "__main__":
    run_script(main, snakemake)  # noqa: F821
