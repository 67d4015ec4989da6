"""List the templates of a published prompt file (names, fields, the roles they fit), read without running it."""

from stressprobe.cdv.prompt_file import template_inventory
from stressprobe.io import write_json
from stressprobe.snakemake_io import log, run_script


def main(smk):
    path = smk.input.prompts[0]  # the input function's one-file list
    rows = template_inventory(path)
    write_json(smk.output[0], {"file": path, "templates": rows})
    log.info("%d templates in %s", len(rows), path)


run_script(main, snakemake)  # noqa: F821
