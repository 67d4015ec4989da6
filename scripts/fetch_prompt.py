"""Download a published prompt template and verify its sha256 (the config pins both)."""

from stressprobe.fetch import fetch_verified
from stressprobe.snakemake_io import log, run_script


def main(smk):
    fetch_verified(smk.params.url, smk.params.sha256, smk.output[0], smk.params.config_key)
    log.info("fetched %s (sha256 %s)", smk.params.url, smk.params.sha256)


run_script(main, snakemake)  # noqa: F821
