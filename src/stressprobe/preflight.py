"""The preflight: before anything is paid, is every model the run uses served, keyed and configured right?

API models (backend `openai`): the provider's model listing (`GET {base_url}/models`, free; Anthropic's own
headers on api.anthropic.com) must list the id that will be run (`substitute` when set, else `model`); the
key's environment variable must be set for a provider's API; the model's parameter rules must be met by the
entry (OpenAI's o-series take `max_completion_tokens` and no temperature/top_p); a `shutdown_date` in the
listing before the run's estimated end is a warning. vLLM models: a local path must exist, a hub id must be
in the Hugging Face cache or on the hub (gated ones need HF_TOKEN), and `max_model_len` must hold the longest
prompt the config sends (estimated as in the cost estimate). Persona pools read from a Hugging Face dataset
must be pinned to a revision (`personas.unpinned`). Each problem is one line naming the config key.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

from stressprobe.config import referenced_models
from stressprobe.errors import StressprobeError
from stressprobe.fetch import unpinned_problem
from stressprobe.llm.backends import run_entry
from stressprobe.llm.backends.openai_protocol import KEYLESS_PLACEHOLDER, OPENAI_BASE_URL
from stressprobe.tables import records_csv

ANTHROPIC_VERSION = "2023-06-01"
# Hosts of paid APIs: a key is required there; a self-hosted server may have none (as the backend allows).
PROVIDER_HOSTS = ("api.openai.com", "api.anthropic.com")
LISTING_TIMEOUT_S = 10.0
# OpenAI's reasoning models (o1, o1-mini, o3, o3-mini, o4-mini...): the token limit is
# `max_completion_tokens` and sampling parameters other than the defaults are refused.
O_SERIES = re.compile(r"^o\d")
# o1-mini and o1-preview take no system (or developer) message at all.
NO_SYSTEM_ROLE = re.compile(r"^o1-(mini|preview)")


@dataclass(frozen=True)
class Finding:
    """One line of the preflight: `error` stops the run, `warning` is shown, `ok` says what was checked."""

    model: str
    level: str
    message: str


Listing = dict[str, dict[str, Any]]
Fetch = Callable[[str, dict[str, str]], Listing]


def models_in_use(config: Mapping[str, Any]) -> list[str]:
    """The registry names the enabled stages of the config call, sorted."""
    enabled = {
        stage for stage in ("judging", "cdv") if (config.get(stage) or {}).get("enabled", True) is not False
    }
    return sorted({name for key, name in referenced_models(dict(config)) if key.split(".")[0] in enabled})


def is_provider(base_url: str) -> bool:
    return urlparse(base_url).hostname in PROVIDER_HOSTS


def listing_request(base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """The listing's URL and headers: Anthropic's API authenticates with `x-api-key` and a version header."""
    url = base_url.rstrip("/") + "/models"
    if urlparse(base_url).hostname == "api.anthropic.com":
        return url + "?limit=1000", {"x-api-key": api_key or "", "anthropic-version": ANTHROPIC_VERSION}
    return url, {"Authorization": f"Bearer {api_key}"} if api_key else {}


class ListingError(Exception):
    """The listing could not be read; the message is the reason, for the preflight's line."""


def fetch_listing(url: str, headers: dict[str, str]) -> Listing:
    """The listing's models by id (one GET; never a completion)."""
    try:
        reply = httpx.get(url, headers=headers, timeout=LISTING_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise ListingError(f"cannot reach {url} ({type(exc).__name__})") from None
    if reply.status_code in (401, 403):
        raise ListingError(f"{url} rejected the API key (HTTP {reply.status_code})")
    if reply.status_code != 200:
        raise ListingError(f"{url} answered HTTP {reply.status_code}")
    try:
        data = reply.json().get("data") or []
    except ValueError:
        raise ListingError(f"{url} did not answer a model listing (not JSON)") from None
    return {str(m.get("id")): m for m in data if isinstance(m, dict)}


# Owners in the listings of llama.cpp's server (`llamacpp`) and llama-cpp-python's (`me`): both answer
# with their loaded model whatever id a request names, so no id can be missing there.
ANY_ID_OWNERS = {"llamacpp", "me"}


def answers_any_id(listing: Listing) -> bool:
    return bool(listing) and all(m.get("owned_by") in ANY_ID_OWNERS for m in listing.values())


def shutdown_day(model: Mapping[str, Any]) -> date | None:
    """A listed model's `shutdown_date` (an ISO date or a Unix time), None when absent or unreadable."""
    value = model.get("shutdown_date")
    if value in (None, ""):
        return None
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC).date()
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError:
        return None


def id_key(name: str, entry: Mapping[str, Any]) -> str:
    """The config key holding the id that is run."""
    return f"models.{name}.substitute" if entry.get("substitute") else f"models.{name}.model"


def parameter_problems(name: str, entry: Mapping[str, Any]) -> list[str]:
    """The entry against its model's parameter rules (OpenAI's reasoning models)."""
    model = str(run_entry(entry)["model"])
    problems = []
    if O_SERIES.match(model):
        if entry.get("token_limit_param", "max_tokens") != "max_completion_tokens":
            problems.append(
                f"config models.{name}.token_limit_param: {model} takes max_completion_tokens, not max_tokens; "
                "set token_limit_param: max_completion_tokens"
            )
        refused = [p for p in ("temperature", "top_p") if p not in (entry.get("unsupported_params") or [])]
        if refused:
            problems.append(
                f"config models.{name}.unsupported_params: {model} refuses {' and '.join(refused)} "
                f"(only the default); add {', '.join(refused)} to unsupported_params"
            )
    if NO_SYSTEM_ROLE.match(model) and entry.get("system_role", "system") != "user":
        problems.append(
            f"config models.{name}.system_role: {model} takes no system message; set system_role: user"
        )
    return problems


def check_api_models(
    entries: Mapping[str, Mapping[str, Any]],
    run_end: date,
    env: Mapping[str, str],
    fetch: Fetch = fetch_listing,
) -> list[Finding]:
    """Keys, listings, parameter rules and shutdown dates of the API models; one listing per endpoint."""
    findings: list[Finding] = []
    listings: dict[tuple[str, str], Listing | ListingError] = {}
    for name, entry in sorted(entries.items()):
        problems = parameter_problems(name, entry)
        model = str(run_entry(entry)["model"])
        base_url = entry.get("base_url") or OPENAI_BASE_URL
        variable = entry.get("api_key_env", "OPENAI_API_KEY")
        key = env.get(variable)
        if not key and is_provider(base_url):
            problems.append(
                f"config models.{name}.api_key_env: environment variable {variable} is not set; "
                f"export {variable}=<your API key> (keys never go in the config)"
            )
        else:
            if (base_url, variable) not in listings:
                url, headers = listing_request(base_url, key or KEYLESS_PLACEHOLDER)
                try:
                    listings[(base_url, variable)] = fetch(url, headers)
                except ListingError as exc:
                    listings[(base_url, variable)] = exc
            listing = listings[(base_url, variable)]
            if isinstance(listing, ListingError):
                problems.append(
                    f"config models.{name}.base_url: {listing}; the model listing is needed first"
                )
            elif model not in listing and not answers_any_id(listing):
                problems.append(
                    f"config {id_key(name, entry)}: {model} is not served by {base_url} (not in its model "
                    f"listing: retired or misspelt); set models.{name}.substitute to a current model id"
                )
            else:
                day = shutdown_day(listing.get(model) or {})
                if day is not None and day <= run_end:
                    findings.append(
                        Finding(
                            name,
                            "warning",
                            f"config {id_key(name, entry)}: {model} shuts down on {day.isoformat()} (the "
                            f"provider's model listing), before the run's estimated end {run_end.isoformat()}; "
                            f"set models.{name}.substitute to run one current model throughout",
                        )
                    )
        findings += [Finding(name, "error", p) for p in problems]
        if not problems:
            findings.append(Finding(name, "ok", f"{model}: served by {base_url}, key and parameters fine"))
    return findings


def hub_cached(repo_id: str, env: Mapping[str, str]) -> bool:
    """Whether the Hugging Face cache holds the model (its config.json)."""
    from huggingface_hub import try_to_load_from_cache

    cache_dir = env.get("HF_HUB_CACHE") or (str(Path(env["HF_HOME"]) / "hub") if env.get("HF_HOME") else None)
    return isinstance(try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir), str)


def trained_base_models(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config key, Hugging Face id or folder) of the open models the GPU training rules load: the LoRA
    classifiers' and DPO's base models, when the CDV stage runs them."""
    cdv = config.get("cdv") or {}
    if cdv.get("enabled", True) is False:
        return []
    lora = (cdv.get("classifier") or {}).get("lora") or {}
    dpo = cdv.get("dpo") or {}
    found = []
    for key, section, on in (
        ("cdv.classifier.lora.base_models", lora, lora.get("enabled")),
        ("cdv.dpo.base_models", dpo, dpo.get("train")),
    ):
        if on:
            found += [(f"{key}[{i}]", str(m)) for i, m in enumerate(section.get("base_models") or [])]
    return found


def resolve_problem(key: str, model: str, env: Mapping[str, str]) -> str | None:
    """Why a folder or hub id cannot be loaded (None: it can): a missing folder, or a hub id neither in the
    cache nor downloadable."""
    if model.startswith(("/", "./", "../")) or Path(model).exists():
        if Path(model).is_dir():
            return None
        return f"{key}: {model} is not a folder; give a model folder in Hugging Face format or a hub id"
    return None if hub_cached(model, env) else hub_problem(key, model, env)


def check_trained_models(trained: Iterable[Sequence[str]], env: Mapping[str, str]) -> list[Finding]:
    """The base models of the training rules resolve (one finding per model, named by its config key)."""
    findings = []
    for key, model in trained:
        problem = resolve_problem(f"config {key}", model, env)
        findings.append(
            Finding(key, "error", problem) if problem else Finding(key, "ok", f"{model}: resolves")
        )
    return findings


def hub_problem(key: str, repo_id: str, env: Mapping[str, str]) -> str | None:
    """Why a hub id not in the cache cannot be downloaded (None: it can); `key` names where it is set."""
    if env.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        return (
            f"{key}: {repo_id} is not in the Hugging Face cache and HF_HUB_OFFLINE is set; download it first"
        )
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        hub = HfApi(endpoint=env.get("HF_ENDPOINT"))  # a mirror (or a test's server) where one is set
        info = hub.model_info(repo_id, token=env.get("HF_TOKEN") or False, timeout=LISTING_TIMEOUT_S)
    except (RepositoryNotFoundError, HfHubHTTPError) as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(exc, RepositoryNotFoundError) or status == 404:
            return (
                f"{key}: {repo_id} is not a model on the Hugging Face hub; fix the id or give a local folder"
            )
        return f"{key}: {repo_id} is not in the Hugging Face cache and the hub answered HTTP {status}"
    except Exception as exc:  # noqa: BLE001 (any network failure: the line says which)
        return f"{key}: {repo_id} is not in the Hugging Face cache and the hub cannot be reached ({type(exc).__name__})"
    if info.gated and not env.get("HF_TOKEN"):
        return f"{key}: {repo_id} is gated; accept its licence on huggingface.co and export HF_TOKEN=<your token>"
    return None


def check_vllm_model(
    name: str, entry: Mapping[str, Any], longest: int | None, env: Mapping[str, str]
) -> list[Finding]:
    """The model resolves, and the longest request (prompt + maximum completion tokens) fits `max_model_len`."""
    model = str(run_entry(entry)["model"])
    problem = resolve_problem(f"config {id_key(name, entry)}", model, env)
    problems = [problem] if problem else []
    limit = int(entry.get("max_model_len", 8192))
    if longest is not None and longest > limit:
        problems.append(
            f"config models.{name}.max_model_len: {limit} tokens cannot hold the longest request the config "
            f"sends it (about {longest} tokens of prompt and maximum answer, estimated as in the cost "
            "estimate); raise max_model_len or lower the task's max_tokens"
        )
    if problems:
        return [Finding(name, "error", p) for p in problems]
    return [Finding(name, "ok", f"{model}: resolves, max_model_len {limit} holds the prompts")]


def check_pools(pools: Mapping[str, Mapping[str, Any]], unpinned: str) -> list[Finding]:
    """Per persona pool the run reads: pinned (its revision or local file), or unpinned (a Hugging Face
    dataset's head: an error under `personas.unpinned: refuse`, else a warning)."""
    findings = []
    for name, source in sorted(pools.items()):
        key = f"personas.sources.{name}"
        problem = unpinned_problem(source, key)
        if problem:
            findings.append(Finding(key, "error" if unpinned == "refuse" else "warning", problem))
        elif source.get("path"):
            findings.append(
                Finding(key, "ok", f"local file {source['path']} (sha256 {source.get('sha256')})")
            )
        else:
            findings.append(Finding(key, "ok", f"{source['hf_dataset']} at revision {source['revision']}"))
    return findings


def run_preflight(
    names: Iterable[str],
    models: Mapping[str, Mapping[str, Any]],
    run_days: int,
    longest: Mapping[str, int] | None = None,
    today: date | None = None,
    env: Mapping[str, str] | None = None,
    fetch: Fetch = fetch_listing,
    trained: Iterable[Sequence[str]] = (),
    pools: Mapping[str, Mapping[str, Any]] | None = None,
    unpinned: str = "warn",
) -> list[Finding]:
    """Every check for the models `names` (llama.cpp models need none: their files are checked on load), the
    `trained` base models ((config key, id) pairs, `trained_base_models`) and the persona `pools` read
    (`check_pools`)."""
    env = os.environ if env is None else env
    run_end = (today or datetime.now(UTC).date()) + timedelta(days=run_days)
    names = sorted(set(names))
    api = {n: models[n] for n in names if models[n].get("backend") == "openai"}
    findings = check_api_models(api, run_end, env, fetch)
    for name in names:
        if models[name].get("backend") == "vllm":
            findings += check_vllm_model(name, models[name], (longest or {}).get(name), env)
    return findings + check_trained_models(trained, env) + check_pools(pools or {}, unpinned)


def problems(findings: Sequence[Finding]) -> list[str]:
    return [f.message for f in findings if f.level == "error"]


def raise_on_problems(findings: Sequence[Finding]) -> None:
    """Stop with one line per problem (and a first line saying nothing was paid)."""
    lines = problems(findings)
    if lines:
        raise StressprobeError(
            f"preflight: {len(lines)} problem(s), no model was called:\n"
            + "\n".join(f"  {line}" for line in lines)
        )


def report_and_stop(findings: Sequence[Finding]) -> None:
    """Warnings as `warning:` lines on stderr (the run goes on), then stop on any problem."""
    for finding in findings:
        if finding.level == "warning":
            print(f"warning: {finding.message}", file=sys.stderr)
    raise_on_problems(findings)


def preflight_csv(findings: Sequence[Finding]) -> str:
    return records_csv(Finding, findings)


def preflight_markdown(findings: Sequence[Finding]) -> str:
    """The findings as a list, errors first; a line saying when nothing needed checking."""
    order = {"error": 0, "warning": 1, "ok": 2}
    lines = [
        f"- **{f.level}** `{f.model}`: {f.message}" for f in sorted(findings, key=lambda f: order[f.level])
    ]
    return "\n".join(lines or ["- no API or vLLM model to check"]) + "\n"


def model_status(findings: Sequence[Finding]) -> dict[str, str]:
    """Per model, the preflight's verdict for the bill: `ok`, `warning` or `error` (the worst)."""
    order = {"ok": 0, "warning": 1, "error": 2}
    status: dict[str, str] = {}
    for f in findings:
        if order[f.level] >= order.get(status.get(f.model, "ok"), 0):
            status[f.model] = f.level
    return status
