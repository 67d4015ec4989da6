"""A judge cell's TREC qrels (failed pairs are counted, not graded; unparsed ones are left out or graded 0 as
`judging.unparsed` says) and nDCG@10 of every run of the dataset under them, the failed pairs' documents
taken out of the rankings."""

from stressprobe.io import atomic_write, read_jsonl
from stressprobe.persona.data import format_qrels
from stressprobe.persona.evaluation import format_ndcg_table, ndcg_table_from_files
from stressprobe.persona.judging import judgment_qrels, unanswered_pairs
from stressprobe.snakemake_io import run_script


def main(smk):
    records = read_jsonl(smk.input.judgments)
    atomic_write(smk.output.qrels, format_qrels(judgment_qrels(records, smk.params.unparsed)))
    rows = ndcg_table_from_files(
        smk.output.qrels, smk.input.runs, smk.input.topics, unanswered_pairs(records)
    )
    atomic_write(smk.output.ndcg, format_ndcg_table(rows))


run_script(main, snakemake)  # noqa: F821
