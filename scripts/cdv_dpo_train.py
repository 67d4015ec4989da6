"""Optional DPO training with TRL on the exported pairs (GPU; runs in envs/dpo.yaml)."""

from stressprobe.io import write_json
from stressprobe.snakemake_io import run_script


def main(smk):
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    data = load_dataset("json", data_files={"train": smk.input.train, "test": smk.input.test})
    tokenizer = AutoTokenizer.from_pretrained(smk.params.base_model)
    model = AutoModelForCausalLM.from_pretrained(smk.params.base_model)
    out_dir = str(smk.output.done).rsplit("/", 1)[0]
    args = DPOConfig(output_dir=out_dir, seed=smk.params.seed, report_to=[])
    trainer = DPOTrainer(
        model=model,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["test"],
        processing_class=tokenizer,
    )
    trainer.train()
    trainer.save_model(out_dir)
    write_json(smk.output.done, {"base_model": smk.params.base_model, "metrics": trainer.evaluate()})


run_script(main, snakemake)  # noqa: F821
