"""Sample and shuffle one dataset's multiple-choice questions for the CDV search."""

from stressprobe.cdv.questions import prepare_questions
from stressprobe.io import write_jsonl
from stressprobe.snakemake_io import run_script


def main(smk):
    source = smk.params.source
    questions = prepare_questions(
        smk.wildcards.dataset,
        source["path"],
        source["hf_dataset"],
        source["hf_config"],
        source["hf_split"],
        source["n"],
        smk.params.seed,
        source["shuffle_choices"],
    )
    write_jsonl(smk.output[0], questions)


run_script(main, snakemake)  # noqa: F821
