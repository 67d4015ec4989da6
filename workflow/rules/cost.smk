# The bill before spending it: `snakemake -f cost_estimate` counts the calls and tokens every cell of the
# config still needs (calls already in the response cache are free) and prices them per model: list and
# batch price, what the config pays, and GPU hours of vLLM models from their configured throughput; and the
# requests that more than one job would ask (results/cost/overlap.csv), per rule and model.
# It prepares the data and persona tables it needs (local, no model calls) but never runs a model.


include: "functions/cost.smk"


rule cost_estimate:
    input:
        unpack(cost_inputs),
    output:
        csv="results/cost/estimate.csv",
        md="results/cost/estimate.md",
        models="results/cost/models.csv",
        overlap="results/cost/overlap.csv",
    log:
        "results/logs/cost/estimate.log",
    localrule: True
    conda:
        "../../envs/llm-cpu.yaml"
    resources:
        **config["resources"]["small"],
    params:
        models=config["models"],
        judging=config["judging"],
        fixed_personas=config["personas"]["fixed"],
        deliveries=config["personas"]["delivery"],
        persona_sources=cost_persona_sources(),
        summarizers={d: summarizer(d) for d in cost_judging_datasets()},
        summaries={
            d: f"results/judging/{d}/summaries.jsonl" for d in cost_judging_datasets()
        },
        cdv=config["cdv"],
        cdv_prompts=cdv_prompts(),
        cdv_cells=cost_cdv_cells(),
        cdv_benchmarks=cost_cdv_benchmarks(),
        dpo_heldout=CDV_DPO_HELDOUT,
        preflight_models=models_in_use(config),
        run_days=config["preflight"]["run_days"],
        trained=trained_base_models(config),
        pools=preflight_pools(),
        unpinned=config["personas"]["unpinned"],
    script:
        "../../scripts/estimate_cost.py"


# Before anything is paid: `snakemake -f preflight` asks each API model's provider listing (free) whether the
# id run is served, checks its key variable and parameter rules and warns of shutdown dates before the
# run's estimated end; vLLM models must resolve. One line per problem; the findings also show in the bill.
rule preflight:
    output:
        csv="results/preflight/preflight.csv",
        md="results/preflight/preflight.md",
    log:
        "results/logs/preflight.log",
    localrule: True
    conda:
        "../../envs/llm-cpu.yaml"
    params:
        names=models_in_use(config),
        models=config["models"],
        run_days=config["preflight"]["run_days"],
        trained=trained_base_models(config),
        pools=preflight_pools(),
        unpinned=config["personas"]["unpinned"],
    script:
        "../../scripts/preflight.py"
