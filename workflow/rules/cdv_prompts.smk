# The CDV prompts' template file: what it holds, listed for choosing cdv.prompts.templates (the file itself
# is a pinned source, fetched and checksummed by fetch_source).


rule cdv_prompt_inventory:
    input:
        prompts=cdv_prompt_inventory_file(),
    output:
        "results/cdv/prompts/inventory.json",
    log:
        "results/logs/cdv/prompts/inventory.log",
    localrule: True
    conda:
        "../../envs/analysis.yaml"
    resources:
        **config["resources"]["small"],
    script:
        "../../scripts/cdv_prompt_inventory.py"
