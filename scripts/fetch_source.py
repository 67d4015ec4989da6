"""Download one pinned source (a published prompt file or question sample) and verify its sha256."""

from stressprobe.fetch import fetch_verified
from stressprobe.snakemake_io import log, run_script


def main(smk):
    p = smk.params
    fetch_verified(p.url, p.sha256, smk.output[0], p.url_key, p.sha256_key)
    log.info("fetched %s (sha256 %s)", p.url, p.sha256)


run_script(main, snakemake)  # noqa: F821
