# Provenance: one record per results area of what produced it, all written by one job (each record reads
# the whole config, so any config change rewrites every one of them anyway: one job, not one per area,
# saves a Python start-up per area).


include: "functions/provenance.smk"


rule provenance:
    output:
        provenance_outputs(),
    log:
        "results/logs/provenance/provenance.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        config=config,
        commit=git_commit(workflow.basedir),
        areas=provenance_areas(),
    script:
        "../../scripts/write_provenance.py"
