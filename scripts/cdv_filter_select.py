"""One of the cost experiment's question sets of one dataset (classifier-selected or random) from its pool."""

from stressprobe.cdv.experiments import select_questions
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.snakemake_io import run_script


def main(smk):
    dataset = smk.wildcards.dataset
    pool = [r for r in read_jsonl(smk.input.pool) if r["dataset"] == dataset]
    questions = read_jsonl(smk.input.questions)
    chosen = select_questions(pool, smk.params.study["n"], smk.params.threshold, smk.params.seed)
    qids = set(chosen[smk.params.draw])
    write_jsonl(smk.output[0], [q for q in questions if q["qid"] in qids])


run_script(main, snakemake)  # noqa: F821
