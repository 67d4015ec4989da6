"""Write the provenance record of one results area."""

from stressprobe.io import write_json
from stressprobe.provenance import provenance_record
from stressprobe.snakemake_io import run_script


def main(smk):
    write_json(
        smk.output[0], provenance_record(dict(smk.params.config), smk.wildcards.area, smk.params.commit)
    )


run_script(main, snakemake)
