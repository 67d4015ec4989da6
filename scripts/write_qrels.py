"""A judge cell's TREC qrels: parsed judgments only (unparsed and failed pairs are counted, not graded)."""

from stressprobe.io import atomic_write, read_jsonl
from stressprobe.persona.data import format_qrels
from stressprobe.persona.judging import judgment_qrels
from stressprobe.snakemake_io import run_script


def main(smk):
    atomic_write(smk.output[0], format_qrels(judgment_qrels(read_jsonl(smk.input[0]))))


run_script(main, snakemake)  # noqa: F821
