"""The rehearsal of config/paper.yaml: its whole DAG run on a laptop under config/rehearsal.yaml.

    python -m tests.support.rehearsal [workdir] [-- snakemake arguments]

`prepare_workdir` lays out a working directory the overlay's paths resolve in: `../shared` beside it (the
shared real data), the paper's inputs shrunk to the overlay's sizes (the first rows of each CDV sample and of
the authors' released labels; RAG24 segments and runs as stand-ins, since the real ones are not here), and a
Hugging Face cache holding tiny random models under the paper's base-model ids (the LoRA and DPO jobs load
them by id, offline). `role_server` is the API: tests/support/openai_server.py with `role_responder`, which
answers each role of the paper's prompts in the format the prompt asks for, and the provider's refusals
(`PAPER_MODEL_RULES`). vLLM models run on tests/support/vllm_standin (put on PYTHONPATH by `rehearsal_env`).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from tests.support.file_server import FileServer
from tests.support.helpers import ROOT, SNAKEMAKE
from tests.support.openai_server import ModelRules, OpenAIServer, choice_letters, prompt_text, unit_hash

OVERLAY = ROOT / "config" / "rehearsal.yaml"
PAPER = ROOT / "config" / "paper.yaml"
SHARED = ROOT.parent / "shared"
# The overlay's base_url (a static file, so a fixed port).
PORT = 18329
FILES_PORT = 18330  # the pinned sources, served at the paper's commit and file name
STAND_INS = {
    "umbrela_zeroshot": "umbrela_standin.yaml",
    "summary_limit80": "summary_standin.txt",
    "cdv_prompts": "prompt_standin.py",
}
SHRUNK = {
    "cdv_mmlu": "MMLU",
    "cdv_commonsenseqa": "CommonsenseQA",
    "cdv_openbookqa": "OpenbookQA",
    "cdv_truthfulqa": "TruthfulQA",
    "cdv_labels_train": "train_data",
    "cdv_labels_valid": "valid_data",
    "cdv_dpo_test": "dpo_test",
}
API_KEYS = {"OPENAI_API_KEY": "sk-rehearsal", "ANTHROPIC_API_KEY": "sk-ant-rehearsal"}

# What the providers accept of each paper model id: the o-series rejects temperature/top_p and
# `max_tokens` (it takes `max_completion_tokens`), and o1-mini takes no system message.
PAPER_MODEL_RULES = {
    "gpt-4o-2024-08-06": ModelRules(),
    "gpt-4o-mini-2024-07-18": ModelRules(),
    "o1-mini-2024-09-12": ModelRules(
        rejected_params=("temperature", "top_p", "max_tokens", "logprobs"), system_message=False
    ),
    "claude-3-5-sonnet-20241022": ModelRules(),
}

# The shrunk inputs (sizes: config/rehearsal.yaml). The overlay pins each file's sha256.
CDV_FILES = ("MMLU", "CommonsenseQA", "OpenbookQA", "TruthfulQA")
CDV_QUESTIONS = 12
RELEASE_ROWS = {"train_data": 24, "valid_data": 8}
DPO_TEST_ROWS = 8  # the released DPO test set's first perturbed questions (Table 5's Orig. benchmark)
DL20_STAND_IN_ORIGINS = ("bm25.run", "bm25-rm3.run", "splade-pp.run")
RAG24_RUNS = ("iiia_standard_a", "iiia_standard_b", "ielab-dense", "bm25-seg", "splade-seg")


def _options(prompt: str) -> list[str] | None:
    """The option texts of a prompt that lists them as a Python list (the authors' {choices})."""
    for line in prompt.splitlines():
        found = re.search(r"(\[['\"].*\])\s*$", line)
        if found:
            try:
                value = ast.literal_eval(found.group(1))
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
    return None


@functools.cache
def known_answers() -> dict[str, str]:
    """question text -> the correct option's text, over the CDV samples here (the victim's knowledge)."""
    answers = {}
    for name in CDV_FILES:
        for item in json.loads((SHARED / "data" / "cdv" / f"{name}.json").read_text(encoding="utf-8")):
            answers[item["question"].strip()] = item["answer"]
    return answers


def victim_choice(prompt: str, options: list[str], h: float) -> str:
    """The option a victim names: the correct one for 90 % of original questions and 50 % of questions
    with added context (so that originals mostly pass and distractions flip some), else another."""
    for question, answer in known_answers().items():
        if question in prompt and answer in options:
            right = h < (0.9 if f"Question: {question}\n" in prompt else 0.5)
            others = [o for o in options if o != answer]
            return answer if right or not others else others[int(unit_hash(h) * len(others))]
    return options[int(h * len(options))]


def role_responder(body: dict[str, Any], index: int) -> str:
    """The answer of each role of the paper's prompts, in the format that prompt asks for, from a hash of
    the request (deterministic; at temperature > 0 also of the sample index)."""
    prompt = prompt_text(body)
    lower = prompt.lower()
    salt = (body.get("seed"), index) if float(body.get("temperature", 0) or 0) > 0 else ()
    h = unit_hash(prompt, *salt)
    options = _options(prompt)
    if "##final score" in lower:
        return f"##final score: {int(h * 4)}"
    if "generated distraction" in lower:
        return f"Generated Distraction: A widely shared note points elsewhere ({int(h * 1000)})."
    if '"final_answer"' in lower and options:
        chosen = [o for o in options if o.casefold() in prompt.split("Answer:")[-1].casefold()]
        return json.dumps({"final_answer": chosen[0] if chosen else options[int(h * len(options))]})
    if '"response"' in lower:
        return f"The rewrite adds context only.\n{json.dumps({'response': 'Yes' if h < 0.8 else 'No'})}"
    if "new question" in lower:
        question = re.search(r"(?m)^Question: (.*)$", prompt)
        text = question.group(1) if question else "the question"
        return f"New question: Some background first. {text}"
    if "summarize" in lower:
        return "The document states one fact about its topic."
    if "yes or no" in lower:
        return "yes" if h < 0.5 else "no"
    if options:
        return f"Thinking it through, the answer is {victim_choice(prompt, options, h)}."
    if re.search(r"answer:\s*[<(\[]?\s*(letter|[a-z]\b)", lower):
        letters = choice_letters(prompt)
        return f"Considering each option in turn.\nAnswer: {letters[int(h * len(letters))]}"
    return "A short answer."


def role_server(**kwargs: Any) -> OpenAIServer:
    """The rehearsal's API on the overlay's port: every paper model id, the providers' refusals."""
    return OpenAIServer(
        responder=role_responder,
        model_rules=PAPER_MODEL_RULES,
        model_ids=tuple(PAPER_MODEL_RULES),
        port=PORT,
        process=True,
        **kwargs,
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def shrunk_files(workdir: Path) -> dict[str, Path]:
    """Write the first rows of each CDV sample and of the released labels; name -> path."""
    data = SHARED / "data" / "cdv"
    out = {}
    for name in CDV_FILES:
        rows = json.loads((data / f"{name}.json").read_text(encoding="utf-8"))[:CDV_QUESTIONS]
        out[name] = workdir / "data" / "rehearsal" / "cdv" / f"{name}.json"
        _write(out[name], json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    for name, n in RELEASE_ROWS.items():
        rows = json.loads((data / "llm_cdv_release" / f"{name}.json").read_text(encoding="utf-8"))
        # Both labels in each shrunk file (the first rows alone may hold one).
        yes = [r for r in rows if r["output"] == "Yes"][: n // 2]
        no = [r for r in rows if r["output"] == "No"][: n - len(yes)]
        out[name] = workdir / "data" / "rehearsal" / "cdv" / f"{name}.json"
        _write(out[name], json.dumps(yes + no, indent=1, ensure_ascii=False) + "\n")
    rows = json.loads((data / "llm_cdv_release" / "dpo_test.json").read_text(encoding="utf-8"))[
        :DPO_TEST_ROWS
    ]
    out["dpo_test"] = workdir / "data" / "rehearsal" / "cdv" / "dpo_test.json"
    _write(out["dpo_test"], json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    return out


def rag24_stand_ins(workdir: Path, qids: list[str]) -> None:
    """The RAG24 inputs that are not here (segments, runs) as stand-ins over the real qrels' judged ids."""
    judged: dict[str, list[str]] = {}
    for line in (SHARED / "data" / "rag24" / "qrels.txt").read_text(encoding="utf-8").splitlines():
        qid, _, docid, _ = line.split()
        if qid in qids:
            judged.setdefault(qid, []).append(docid)
    base = workdir / "data" / "paper" / "rag24"
    segments = [
        json.dumps({"docid": d, "segment": f"Segment {d} discusses topic {q} in a few plain words."})
        for q in qids
        for d in judged[q]
    ]
    _write(base / "segments.jsonl", "\n".join(segments) + "\n")
    for r, run in enumerate(RAG24_RUNS):
        lines = []
        for qid in qids:
            docs = sorted(judged[qid], key=lambda d: unit_hash(run, d))[:100]
            lines += [f"{qid} Q0 {d} {i + 1} {100 - i - r * 0.1:.2f} {run}" for i, d in enumerate(docs)]
        _write(base / "runs" / f"{run}.run", "\n".join(lines) + "\n")


def dl20_runs(workdir: Path, representative: list[str]) -> None:
    """The paper's runs directory: the 39 real DL20 runs here, and the paper's representative systems
    (not public here) as stand-ins, each a real first-stage run under the system's name."""
    runs = workdir / "data" / "paper" / "dl20" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    for real in sorted((SHARED / "data" / "dl20" / "runs").glob("*.run")):
        if not (runs / real.name).exists():
            (runs / real.name).symlink_to(real)
    for name, origin in zip(representative, DL20_STAND_IN_ORIGINS, strict=True):
        lines = (SHARED / "data" / "dl20" / "runs" / origin).read_text(encoding="utf-8").splitlines()
        _write(runs / f"{name}.run", "".join(f"{' '.join(line.split()[:5])} {name}\n" for line in lines))


def hub_cache(home: Path, model_ids: list[str], texts: list[str]) -> None:
    """A Hugging Face cache (HF_HOME) with a tiny random causal LM saved under each model id, offline."""
    from tests.support.toy_hf import toy_model_and_tokenizer

    revision = "0" * 40
    for model_id in model_ids:
        repo = home / "hub" / f"models--{model_id.replace('/', '--')}"
        snapshot = repo / "snapshots" / revision
        if (snapshot / "config.json").exists():
            continue
        model, tokenizer = toy_model_and_tokenizer(texts)
        # Half of the vocabulary ends a generation: answers of a few tokens, not the evaluation's 1,024
        # random ones per prompt (the DPO job generates on the CPU here).
        model.generation_config.eos_token_id = list(range(3, model.config.vocab_size, 2))
        model.save_pretrained(snapshot)
        tokenizer.save_pretrained(snapshot)
        _write(repo / "refs" / "main", revision)


def overlay_config() -> dict[str, Any]:
    return yaml.safe_load(OVERLAY.read_text(encoding="utf-8"))


def prepare_workdir(workdir: Path) -> Path:
    """Lay out `workdir` for the rehearsal (see the module docstring); returns it."""
    workdir.mkdir(parents=True, exist_ok=True)
    links = {
        workdir / "resources": ROOT / "resources",
        workdir / "tests": ROOT / "tests",  # the overlay's stand-in sources
        workdir.parent / "shared": SHARED,
    }
    for link, target in links.items():
        if not link.exists():
            link.symlink_to(target)
    files = shrunk_files(workdir)
    overlay, paper = overlay_config(), yaml.safe_load(PAPER.read_text(encoding="utf-8"))
    for name, entry in overlay["sources"].items():
        origin = ROOT / "tests" / "rehearsal" / "sources" / STAND_INS[name] if name in STAND_INS else None
        data = (origin or files[SHRUNK[name]]).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != entry["sha256"]:
            raise AssertionError(
                f"sources.{name}: sha256 {digest}, config/rehearsal.yaml pins {entry['sha256']}"
            )
        served = workdir / "served" / entry["url"].split(f":{FILES_PORT}/", 1)[1]
        served.parent.mkdir(parents=True, exist_ok=True)
        served.write_bytes(data)
    dl20_runs(workdir, paper["analysis"]["representative_systems"]["dl20"])
    rag24_stand_ins(workdir, [str(q) for q in overlay["judging"]["datasets"]["rag24"]["queries"]])
    cdv = paper["cdv"]
    # The training rules' base models load from the cache; the vLLM models (answered by the stand-in) need
    # only be there, as the preflight checks on an offline node.
    vllm_models = [m["model"] for m in paper["models"].values() if m["backend"] == "vllm"]
    base_models = sorted(
        {*cdv["classifier"]["lora"]["base_models"], *cdv["dpo"]["base_models"], *vllm_models}
    )
    texts = [p.read_text(encoding="utf-8") for p in files.values()]
    hub_cache(workdir / "hf", base_models, texts)
    return workdir


def rehearsal_env(workdir: Path) -> dict[str, str]:
    """The jobs' environment: the API keys the config names, the vLLM stand-in, the tiny models, offline."""
    path = os.pathsep.join([str(ROOT / "tests" / "support" / "vllm_standin"), str(ROOT / "src"), str(ROOT)])
    return {
        **os.environ,
        **API_KEYS,
        "PYTHONPATH": path + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "HF_HOME": str(workdir / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "STRESSPROBE_VLLM_STANDIN_LOG": str(workdir / "vllm_standin.jsonl"),
        "STRESSPROBE_VLLM_STANDIN_ROLES": "1",
    }


def rehearsal_command(workdir: Path, *args: str) -> list[str]:
    """snakemake on 2 cores in `workdir`, paper.yaml under the overlay (targets before --configfile)."""
    return [
        *SNAKEMAKE,
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--cores",
        "2",
        *args,
        "--configfile",
        str(PAPER),
        str(OVERLAY),
    ]


def executed_jobs(workdir: Path) -> Counter:
    """rule -> jobs that finished, over every Snakemake log of `workdir` (a resumed run counts once)."""
    finished: Counter = Counter()
    for log in sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log")):
        finished.update(re.findall(r"Finished jobid: \d+ \(Rule: (\w+)\)", log.read_text(encoding="utf-8")))
    return finished


def error_records(workdir: Path) -> list[str]:
    """`file:line` of every output record (results/**/*.jsonl, the cache aside) that holds an error."""
    found = []
    for path in sorted((workdir / "results").rglob("*.jsonl")):
        if "cache" in path.relative_to(workdir / "results").parts:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            record = json.loads(line) if line.strip() else {}
            if isinstance(record, dict) and (record.get("status") == "error" or record.get("error")):
                found.append(f"{path.relative_to(workdir)}:{number}")
    return found


def scorecard_coverage(path: Path) -> tuple[int, int, list[dict[str, str]]]:
    """(printed values with a run value, printed values, the rows without one) of a scorecard CSV."""
    import csv

    with open(path, encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    blank = [r for r in rows if r.get("run") in (None, "")]
    return len(rows) - len(blank), len(rows), blank


def main(argv: list[str]) -> int:
    import subprocess

    args = argv[argv.index("--") + 1 :] if "--" in argv else []
    workdir = Path(argv[0] if argv and argv[0] != "--" else "rehearsal/run").resolve()
    prepare_workdir(workdir)
    with role_server(), FileServer(workdir / "served", FILES_PORT):
        return subprocess.run(rehearsal_command(workdir, *args), env=rehearsal_env(workdir)).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
