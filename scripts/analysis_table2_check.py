"""The Table 2 check: the run's retrieved personas of one query beside the six the paper prints."""

from stressprobe import tables
from stressprobe.io import read_jsonl
from stressprobe.persona.table2 import read_expected, table2_check
from stressprobe.snakemake_io import run_script


def main(smk):
    selections = {
        source: read_jsonl(path) for source, path in zip(smk.params.sources, smk.input.personas, strict=True)
    }
    expected = [row for row in read_expected(smk.input.values) if row["source"] in selections]
    table = table2_check(selections, smk.params.qid, expected)
    tables.write_table(table, tables.stem(smk.output.table))


run_script(main, snakemake)  # noqa: F821
