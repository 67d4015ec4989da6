# Provenance: one record per results area of what produced it.


wildcard_constraints:
    area="data|personas|judging|analysis|cdv|tables|figures",


rule provenance:
    output:
        "results/{area}/provenance.json",
    log:
        "results/logs/provenance/{area}.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    params:
        config=config,
        commit=git_commit(workflow.basedir),
    script:
        "../../scripts/write_provenance.py"
