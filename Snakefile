# stressprobe: stress-testing LLM-based evaluation.
#   1. persona-conditioned relevance judging (data -> personas -> judging -> analysis)
#   2. contextual distraction vulnerability (cdv)
# Layout and file contracts: see README.md.
from snakemake.utils import min_version

min_version("9.0")


# A run is described by one config: the embedded demo when none is given, else the --configfile(s) alone
# (the demo is not merged under them). Several --configfile are merged in order, later keys over earlier
# ones (to layer a small override on a complete config); --config key=value applies on top of all.
# `workflow.overwrite_configfiles` (the --configfile list) is part of Snakemake's executor-plugin interface.
# The demo config is found beside this Snakefile, so `--directory` elsewhere still runs the demo.
if not workflow.overwrite_configfiles:

    configfile: f"{workflow.basedir}/config/config.yaml"


include: "workflow/rules/common.smk"
include: "workflow/rules/sources.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/personas.smk"
include: "workflow/rules/judging.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/cdv.smk"
include: "workflow/rules/cdv_served.smk"
include: "workflow/rules/cdv_prompts.smk"
include: "workflow/rules/cdv_classifier.smk"
include: "workflow/rules/cdv_dpo.smk"
include: "workflow/rules/cdv_study.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/provenance.smk"
include: "workflow/rules/cost.smk"


rule all:
    default_target: True
    input:
        final_outputs(),
