# Pinned published files (prompt templates, question samples): one download job per source, on the
# submitting host (compute nodes are often offline), refused unless the file's sha256 is the pinned one.


include: "functions/sources.smk"


rule fetch_source:
    output:
        f"{_fetch.SOURCES_DIR}/{{source}}/{{filename}}",
    log:
        "results/logs/sources/{source}/{filename}.log",
    wildcard_constraints:
        source=FETCHED_SOURCE_RE,
        filename=r"[^/]+",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    params:
        url=source_param("url"),
        sha256=source_param("sha256"),
        url_key=source_param("url_key"),
        sha256_key=source_param("sha256_key"),
    script:
        "../../scripts/fetch_source.py"
