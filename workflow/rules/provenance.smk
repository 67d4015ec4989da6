# Provenance: one record per results area of what produced it.


rule provenance:
    output:
        "results/{area}/provenance.json",
    params:
        config=config,
        commit=git_commit(workflow.basedir),
    log:
        "results/logs/provenance/{area}.log",
    localrule: True
    script:
        "../../scripts/write_provenance.py"
