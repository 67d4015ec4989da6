# stressprobe: stress-testing LLM-based evaluation.
#   1. persona-conditioned relevance judging (data -> personas -> judging -> analysis)
#   2. contextual distraction vulnerability (cdv)
# Layout and file contracts: see README.md.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/personas.smk"
include: "workflow/rules/judging.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/cdv.smk"
include: "workflow/rules/cdv_vllm.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/provenance.smk"
include: "workflow/rules/cost.smk"


rule all:
    default_target: True
    input:
        final_outputs(),
