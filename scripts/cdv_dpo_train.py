"""Optional DPO training with TRL on the exported pairs, then the held-out evaluation before and after
(Table 5); GPU, runs in envs/dpo.yaml."""

from pathlib import Path

from stressprobe.cdv.dpo import load_base_model, train_and_evaluate
from stressprobe.io import read_jsonl, write_json
from stressprobe.snakemake_io import run_script


def main(smk):
    settings, base_model = smk.params.settings, smk.params.base_model
    model, tokenizer = load_base_model(base_model, smk.threads)
    out_dir = str(Path(smk.output.done).parent)
    result = train_and_evaluate(
        model,
        tokenizer,
        read_jsonl(smk.input.train),
        read_jsonl(smk.input.validation),
        read_jsonl(smk.input.heldout),
        settings,
        out_dir,
        smk.params.seed,
    )
    result.pop("trainer").save_model(out_dir)
    write_json(smk.output.done, {"base_model": base_model, **result})


run_script(main, snakemake)  # noqa: F821
