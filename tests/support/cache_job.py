"""One job of the multi-host cache tests, run as its own process (often in its own UTS namespace).

    python tests/support/cache_job.py CACHE_PATH BASE_URL FIRST COUNT OUT_JSON

Asks judging requests FIRST .. FIRST+COUNT-1 through the LLM layer (openai backend against the test's real
HTTP server) and writes what it got to OUT_JSON: host name, pid, usage and the answer texts.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from stressprobe.llm import Request, open_client

KEY_ENV = "STRESSPROBE_TEST_API_KEY"


def requests(first: int, count: int) -> list[Request]:
    return [
        Request.chat(user=f"pair {i}: give ##final score: <0-3>", max_tokens=8)
        for i in range(first, first + count)
    ]


def main() -> None:
    cache, base_url, first, count, out = sys.argv[1:6]
    models = {
        "api": {
            "backend": "openai",
            "model": "test-model",
            "base_url": base_url,
            "api_key_env": KEY_ENV,
            "concurrency": 4,
            "timeout_s": 10.0,
            "max_retries": 6,
            "backoff_s": 0.01,
        }
    }
    with open_client(models, "api", cache) as client:
        responses = client.generate(requests(int(first), int(count)))
        result = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "calls_made": client.usage.calls_made,
            "cache_hits": client.usage.cache_hits,
            "taken_over": client.cache.claims.taken_over,
            "texts": [r.text for r in responses],
        }
    with open(out, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
