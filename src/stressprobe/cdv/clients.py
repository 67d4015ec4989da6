"""Opening the model clients of a CDV job: one client per distinct model, one merged usage sidecar."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from stressprobe.io import write_json
from stressprobe.llm import open_client
from stressprobe.llm.usage import Usage

# Every counter of Usage adds up across clients, and so does the cost computed from them.
ADDITIVE = (*(f.name for f in dataclasses.fields(Usage)), "cost_usd")


@contextlib.contextmanager
def role_clients(models: dict[str, Any], roles: dict[str, str], cache_path: str):
    """role -> client; roles naming the same model share one client (one llama.cpp model in memory)."""
    with contextlib.ExitStack() as stack:
        by_model = {
            name: stack.enter_context(open_client(models, name, cache_path))
            for name in dict.fromkeys(roles.values())
        }
        yield {role: by_model[name] for role, name in roles.items()}


def write_merged_usage(
    clients: dict[str, Any], path: str | Path, usage: dict[str, Usage] | None = None
) -> None:
    """The job's usage sidecar: the LLM layer's record, summed over the distinct clients the job used; or,
    with `usage` (role -> a part of its client's usage), the sidecar of that part of the job."""
    distinct = {id(c): c for c in clients.values()}
    if usage is None:
        records = [client.usage_record() for client in distinct.values()]
    else:
        shares = {key: Usage() for key in distinct}
        for role, part in usage.items():
            shares[id(clients[role])] += part
        records = [client.usage_record(shares[key]) for key, client in distinct.items()]
    merged = dict(records[0])
    for record in records[1:]:
        for key in ADDITIVE:
            merged[key] = merged.get(key, 0) + record.get(key, 0)
        merged["model"] = f"{merged['model']}+{record['model']}"
        merged["backend"] = f"{merged['backend']}+{record['backend']}"
    merged["cost_usd"] = round(merged.get("cost_usd", 0), 6)
    write_json(path, merged)
