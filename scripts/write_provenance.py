"""Write the provenance record of every results area (one output per area, in `params.areas` order)."""

from stressprobe.io import write_json
from stressprobe.provenance import provenance_record
from stressprobe.snakemake_io import run_script


def main(smk):
    for area, path in zip(smk.params.areas, smk.output, strict=True):
        write_json(path, provenance_record(dict(smk.params.config), area, smk.params.commit))


run_script(main, snakemake)  # noqa: F821
