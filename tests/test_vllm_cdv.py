"""The CDV vLLM rules on real vLLM (vLLM's CPU build, SmolLM2-135M converted from the demo's GGUF; see
tests/test_vllm_real.py): a search cell whose victim is a vLLM model (rule cdv_search), the grouped evaluation
(cdv_eval_vllm), and the served dataset job (cdv_vllm_served) with a real `vllm serve`, which must stop
when the job ends, when it raises and on SIGTERM, and report a server that dies during start.

An engine load costs 1–2 min on 2 cores, so each module fixture is one workflow run that the tests read.
The tests read the files under results/cdv/... that every CDV job writes, not the jobs' internals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from stressprobe.llm.cache import iter_records
from tests.support.api_workdir import error_lines, write_api_config, write_cdv_questions
from tests.support.helpers import make_workdir
from tests.support.vllm_env import job_env
from tests.support.vllm_real import alive, engine_entry, env_command, require, server_pids

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def env():
    return require()


DATASET = "tinyqa"  # tests/configs/api.yaml's, 2 questions (api_workdir.CDV_QUESTIONS)
SAMPLES = 5
RUN_TIMEOUT_S = 1500  # a bound, never reached on a healthy run
START_TIMEOUT_S = 300  # a server that dies during start is reported within this


def cdv_config(workdir: Path, model: Path | str, cells: list[tuple[str, str]], **edits) -> Path:
    """The two tiny questions searched by vLLM models (each a registry name of the converted model) with the
    project's own prompts: n = 5 samples at 0.7 with the run's seed, up to three expansions per question, greedy
    evaluation (0.001, decoded greedily) with mitigation, no baselines or classifier."""
    write_cdv_questions(workdir)
    names = sorted({m for cell in cells for m in cell})
    return write_api_config(
        workdir,
        None,
        {
            **{f"models.{name}": {**engine_entry(model), "answer_prefill": True} for name in names},
            "judging.models": [],
            "cdv.cells": [{"proxy": p, "victim": v} for p, v in cells],
            "cdv.eval_models": ["gpu"],
            "cdv.search": {
                "samples": SAMPLES,
                "victim_temperature": 0.7,
                "limits": "authors_code",
                "max_expansions": 3,
                "max_candidates": 1,
                "proxy_tries": 1,
                "victim_max_tokens": 8,
                "proxy_max_tokens": 32,
                # The tiny questions are a few words: at the paper's 10 every added context is too long.
                "length_ratio_max": 50,
            },
            "cdv.classifier": {"kind": "none"},
            "cdv.baselines.enabled": False,
            "cdv.eval": {"max_tokens": 8, "temperature": 0.001},
            **edits,
        },
    )


SEARCH_FILES = ("search.jsonl", "perturbed.jsonl", "search.summary.json", "search.usage.json")


def cell_dir(workdir: Path, proxy: str, victim: str) -> Path:
    return workdir / "results" / "cdv" / DATASET / proxy / victim


def cell_files(workdir: Path, cells: list[tuple[str, str]], model: str = "gpu") -> list[Path]:
    """Every cell's search files and `model`'s evaluation and mitigation records and sidecars."""
    files = []
    for proxy, victim in cells:
        base = cell_dir(workdir, proxy, victim)
        files += [base / name for name in SEARCH_FILES]
        kinds = [(k, e) for k in ("eval", "mitigation") for e in (".jsonl", ".usage.json")]
        files += [base / kind / f"{model}{ext}" for kind, ext in kinds]
    return files


def command(python: Path, workdir: Path, config: Path, targets: list[Path]) -> list[str]:
    return env_command(python, workdir, config, *(str(t.relative_to(workdir)) for t in targets))


def run(python: Path, workdir: Path, config: Path, targets: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(python, workdir, config, targets),
        capture_output=True,
        text=True,
        env=job_env(),
        timeout=RUN_TIMEOUT_S,
    )


def start(python: Path, workdir: Path, config: Path, targets: list[Path]) -> subprocess.Popen:
    """Like `run`, but returns at once; its output goes to files beside the working directory (`output`), so
    that no pipe fills while the test waits, and it runs in a process group of its own."""
    with open(workdir.with_name("stdout"), "w") as out, open(workdir.with_name("stderr"), "w") as err:
        return subprocess.Popen(
            command(python, workdir, config, targets),
            stdout=out,
            stderr=err,
            text=True,
            env=job_env(),
            start_new_session=True,
        )


def output(workdir: Path) -> str:
    """The stderr of the last run `start`ed in `workdir`."""
    return workdir.with_name("stderr").read_text(errors="replace")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def group_alive(pgid: int) -> list[int]:
    """The live processes of a process group (a server's session: its engine core and workers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def assert_stopped(pids: list[int]) -> None:
    """Every server named in the log is gone, with every process of its session."""
    assert pids, "the job log names no vLLM server"
    for pid in pids:
        assert not alive(pid) and not group_alive(pid), pid


def assert_no_outputs(files: list[Path]) -> None:
    assert not [str(f) for f in files if f.exists()]


# --- in-process: cdv_search with a vLLM victim, then one cdv_eval_vllm job for every cell ---------------

CELLS = [("gpu", "gpu"), ("gpu-b", "gpu-b")]


@pytest.fixture(scope="module")
def in_process(env, tmp_path_factory):
    python, model = env
    workdir = make_workdir(tmp_path_factory.mktemp("cdv") / "w")
    config = cdv_config(workdir, model, CELLS, **{"cdv.eval.vllm_served": False})
    proc = run(python, workdir, config, cell_files(workdir, CELLS))
    return workdir, proc


def test_a_vllm_victims_search_records_vllms_samples(in_process):
    workdir, proc = in_process
    assert proc.returncode == 0, proc.stderr[-6000:]
    victim_requests, made, asked = [], [], set()
    for proxy, victim in CELLS:
        base = cell_dir(workdir, proxy, victim)
        records = read_jsonl(base / "search.jsonl")
        summary = json.loads((base / "search.summary.json").read_text())
        usage = json.loads((base / "search.usage.json").read_text())
        perturbed = read_jsonl(base / "perturbed.jsonl")
        assert (usage["model"], usage["backend"]) == (victim, "vllm")
        # Every request of the summary was asked of vLLM or read from the cache, and nothing else was.
        assert summary["requests_total"] == usage["calls_made"] + usage["cache_hits"] > 0
        assert summary["nodes"] == len(records) and summary["questions"] == 2
        assert sum(summary["status_counts"].values()) == len(records)
        # The perturbed file is the summary's successful perturbations, node for node.
        successes = [r for r in records if r["status"] == "success" and r["depth"] > 0]
        assert len(perturbed) == summary["successful_perturbations"] == len(successes)
        assert [p["node_id"] for p in perturbed] == [r["node_id"] for r in successes]
        for record in records:
            assert record["error"] is None, record
            if record["success_rate"] is not None:  # the victim was asked: n samples, r = correct / n
                assert len(record["answers"]) == SAMPLES, record
                right = sum(a == record["correct_option"] for a in record["answers"])
                assert record["success_rate"] == pytest.approx(right / SAMPLES), record
                asked.add(record["question"])
        victim_requests.append(summary["requests"]["victim"]["requests"])
        made.append(usage["calls_made"])
    # The cells ask the same requests of the same model (the registry name is no part of its identity): the
    # search that runs second reads every answer from the cache.
    assert min(made) == 0 < max(made) and victim_requests[0] == victim_requests[1] > 0
    # The victim's requests as the cache holds them, one per distinct question it was asked (a question the
    # proxy wrote twice is asked once): n = 5 at 0.7 with the run's seed, five texts from vLLM each.
    sampled = [
        r for r in iter_records(workdir / "results/cache/llm") if r["request"]["decoding"]["n"] == SAMPLES
    ]
    assert len(sampled) == len(asked) > 0
    seed = yaml.safe_load((workdir / "config.yaml").read_text())["seed"]
    for record in sampled:
        decoding = record["request"]["decoding"]
        assert (decoding["temperature"], decoding["seed"]) == (0.7, seed), decoding
        assert record["request"]["model"]["backend"] == "vllm"
        assert len(record["response"]["texts"]) == SAMPLES
    # Sampled, not one greedy answer repeated n times.
    assert any(len(set(r["response"]["texts"])) > 1 for r in sampled)


def test_one_vllm_job_evaluates_every_cell_greedily(in_process):
    workdir, proc = in_process
    assert proc.returncode == 0, proc.stderr[-6000:]
    log = (workdir / f"results/logs/cdv/eval/{DATASET}/gpu.log").read_text()
    # One job (one process, one client) wrote every cell's records; each vLLM job of the run started one
    # engine (vLLM's engine core announces itself on the run's output): two searches, one evaluation.
    assert log.count("job: rule cdv_eval_vllm") == 1
    assert (proc.stdout + proc.stderr).count("Initializing a V1 LLM engine") == 3, proc.stdout[-3000:]
    for proxy, victim in CELLS:
        base = cell_dir(workdir, proxy, victim)
        perturbed = read_jsonl(base / "perturbed.jsonl")
        for kind in ("eval", "mitigation"):
            records = read_jsonl(base / kind / "gpu.jsonl")
            usage = json.loads((base / kind / "gpu.usage.json").read_text())
            assert (usage["model"], usage["backend"]) == ("gpu", "vllm"), (proxy, kind)
            assert usage["calls_made"] + usage["cache_hits"] == len(records) == 2 + len(perturbed)
            assert all(r["status"] != "error" and r["raw"] != "Answer:" for r in records), records
            assert records[:2] and {r["condition"] for r in records[:2]} == {"original"}
    # Greedy: the evaluation's 0.001, one sample per request (vLLM decodes it at temperature 0).
    asked = [r["request"]["decoding"] for r in iter_records(workdir / "results/cache/llm")]
    evaluated = [d for d in asked if d["temperature"] == 0.001]
    assert evaluated and all(d["n"] == 1 for d in evaluated)


# --- served: cdv_vllm_served with a real `vllm serve`, which stops with the job however it ends -----------

SERVED = [("gpu", "gpu")]
SERVED_LOG = Path(f"results/logs/cdv/served/{DATASET}.log")


@pytest.fixture(scope="module")
def served(env, tmp_path_factory):
    """(python, workdir, config) of one served dataset job; the tests below run it in turn (file order):
    it raises, it is terminated, it finishes."""
    python, model = env
    workdir = make_workdir(tmp_path_factory.mktemp("served") / "w")
    return python, workdir, cdv_config(workdir, model, SERVED)


def job_log(workdir: Path) -> str:
    path = workdir / SERVED_LOG
    return path.read_text(errors="replace") if path.exists() else ""


def test_the_served_job_stops_its_server_when_it_raises(served):
    python, workdir, config = served
    # A file where the response cache goes: the job fails inside the served block, opening its first client.
    cache = workdir / "results" / "cache" / "llm"
    cache.parent.mkdir(parents=True)
    cache.write_text("not a cache\n")
    try:
        proc = run(python, workdir, config, cell_files(workdir, SERVED))
    finally:
        cache.unlink()
    assert proc.returncode != 0
    assert [line.split(" (")[0] for line in error_lines(proc.stderr)] == [
        "error: cache.path results/cache/llm: cannot open the response cache"
    ], proc.stderr[-4000:]
    log = job_log(workdir)
    assert "gpu: the vLLM server answers at" in log  # it failed with the server up
    assert "cannot open the response cache" in log
    assert_stopped(server_pids(workdir / SERVED_LOG))
    assert_no_outputs(cell_files(workdir, SERVED))


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_the_served_job_stops_its_server_on_sigterm(served):
    python, workdir, config = served
    (workdir / SERVED_LOG).unlink(missing_ok=True)  # the last run's; the job writes it anew
    run_ = start(python, workdir, config, cell_files(workdir, SERVED))
    try:
        # Terminated once the server has answered some of the search's requests (they are in the cache).
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not (
            "the vLLM server answers at" in job_log(workdir) and iter_records(workdir / "results/cache/llm")
        ):
            assert run_.poll() is None and time.monotonic() < deadline, job_log(workdir)[-4000:]
            time.sleep(0.5)
        (pid,) = server_pids(workdir / SERVED_LOG)
        job = parent_pid(pid)  # the job's own process started the server
        os.kill(job, signal.SIGTERM)  # as Snakemake cancelling the job, or a scheduler's time limit
        run_.wait(timeout=300)
    finally:
        if run_.poll() is None:
            os.killpg(run_.pid, signal.SIGKILL)
    assert run_.returncode != 0
    assert_stopped([pid])
    assert "SIGTERM: stopping the vLLM servers" in job_log(workdir), job_log(workdir)[-3000:]
    assert_no_outputs(cell_files(workdir, SERVED))


def test_the_served_job_searches_and_evaluates_and_stops_its_server(served):
    python, workdir, config = served
    (workdir / SERVED_LOG).unlink(missing_ok=True)
    proc = run(python, workdir, config, cell_files(workdir, SERVED))
    assert proc.returncode == 0, proc.stderr[-6000:]
    (pid,) = server_pids(workdir / SERVED_LOG)
    assert_stopped([pid])  # at the job's end
    # `system_role: auto` asked the real server to render SmolLM2's template (POST /tokenize): it could.
    assert "system-turn check" not in job_log(workdir) and "refuses a system turn" not in job_log(workdir)
    base = cell_dir(workdir, *SERVED[0])
    summary = json.loads((base / "search.summary.json").read_text())
    usage = json.loads((base / "search.usage.json").read_text())
    assert (usage["model"], usage["backend"]) == ("gpu", "vllm")
    assert summary["requests_total"] == usage["calls_made"] + usage["cache_hits"]
    assert usage["cache_hits"] > 0  # what the server answered before SIGTERM is not asked again
    perturbed = read_jsonl(base / "perturbed.jsonl")
    assert len(perturbed) == summary["successful_perturbations"]
    for kind in ("eval", "mitigation"):
        records = read_jsonl(base / kind / "gpu.jsonl")
        usage = json.loads((base / kind / "gpu.usage.json").read_text())
        assert (usage["model"], usage["backend"]) == ("gpu", "vllm")
        assert usage["calls_made"] + usage["cache_hits"] == len(records) == 2 + len(perturbed)
        assert all(r["status"] != "error" for r in records), records
    # Every request went to the server: the job never started an engine of its own.
    assert "Initializing a V1 LLM engine" in (workdir / SERVER_LOG).read_text()
    assert "Initializing a V1 LLM engine" not in proc.stdout + proc.stderr


# --- a server that dies during start: one error line naming the model, the config key and the server log --

SERVER_LOG = Path(f"results/logs/cdv/served/{DATASET}.gpu.server.log")


def start_failure(python: Path, model: Path, tmp_path: Path, entry: dict, kill: bool = False):
    """Run the served job with `entry` for the model; `kill`: kill -9 its server as soon as it is started."""
    workdir = make_workdir(tmp_path / "w")
    config = cdv_config(workdir, model, SERVED, **{"models.gpu": {**engine_entry(model), **entry}})
    started = time.monotonic()
    run_ = start(python, workdir, config, cell_files(workdir, SERVED))
    try:
        pids: list[int] = []
        while kill and not pids and run_.poll() is None:
            pids = server_pids(workdir / SERVED_LOG)
            time.sleep(0.2)
        if pids:
            os.kill(pids[0], signal.SIGKILL)
        run_.wait(timeout=START_TIMEOUT_S)
    finally:
        if run_.poll() is None:
            os.killpg(run_.pid, signal.SIGKILL)
    return workdir, run_.returncode, output(workdir), time.monotonic() - started


@pytest.mark.parametrize(
    "entry, kill, reason",
    [
        # Longer than the model's 8,192 positions: vLLM refuses the engine arguments and exits.
        ({"max_model_len": 100_000}, False, "exited with status 1"),
        ({}, True, "was killed by signal 9 (SIGKILL)"),
    ],
    ids=["bad-engine-args", "killed"],
)
def test_a_server_that_dies_during_start_is_one_error_line(env, tmp_path, entry, kill, reason):
    python, model = env
    workdir, status, stderr, elapsed = start_failure(python, model, tmp_path, entry, kill)
    assert status != 0 and elapsed < START_TIMEOUT_S
    (line,) = error_lines(stderr)
    assert line.startswith(f"error: config models.gpu: the vLLM server of {model} {reason} before"), line
    assert f"see {SERVER_LOG}" in line, line
    if not kill:
        assert "max_model_len" in line  # vLLM's own reason, from the server log's tail
    assert_stopped(server_pids(workdir / SERVED_LOG))
    assert_no_outputs(cell_files(workdir, SERVED))


SLOW_START_JOB = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)  # serving's 'vLLM server pid N' line, on stderr (the job's log)
from stressprobe.errors import StressprobeError
from stressprobe.llm.serving import serve_models
try:
    with serve_models({"gpu": json.loads(sys.argv[1])}, ["gpu"], sys.argv[2], seed=0, ready_timeout_s=3):
        print("SERVED", flush=True)
except StressprobeError as exc:
    print("ERROR", exc, flush=True)
"""


def test_a_server_that_does_not_answer_in_time_is_stopped(env, tmp_path):
    # A real load takes about a minute here: a 3 s bound expires while the server is still loading.
    python, model = env
    prefix = tmp_path / "logs" / "job"
    prefix.parent.mkdir()
    with open(prefix.parent / "job.log", "w") as stderr:
        proc = subprocess.run(
            [str(python), "-c", SLOW_START_JOB, json.dumps(engine_entry(model)), str(prefix)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=job_env(),
            timeout=START_TIMEOUT_S,
        )
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith(("ERROR ", "SERVED"))]
    assert line.startswith(f"ERROR config models.gpu: the vLLM server of {model} did not answer"), line
    assert "within 3 s" in line, line
    assert_stopped(server_pids(prefix))
