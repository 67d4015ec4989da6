"""A judge cell's TREC qrels: parsed judgments (failed pairs are counted, not graded; unparsed ones are
left out or graded 0 as `judging.unparsed` says)."""

from stressprobe.io import atomic_write, read_jsonl
from stressprobe.persona.data import format_qrels
from stressprobe.persona.judging import judgment_qrels
from stressprobe.snakemake_io import run_script


def main(smk):
    atomic_write(smk.output[0], format_qrels(judgment_qrels(read_jsonl(smk.input[0]), smk.params.unparsed)))


run_script(main, snakemake)  # noqa: F821
