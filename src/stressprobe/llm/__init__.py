"""The LLM call layer: every model call of the workflow goes through `open_client(...).generate(...)`.

with open_client(config["models"], "smollm2-135m", cache_path) as client:
    responses = client.generate([Request.chat(user="...", max_tokens=8)])
    client.write_usage("out.usage.json")
"""

from stressprobe.llm.client import Client, open_client
from stressprobe.llm.labels import label_distribution
from stressprobe.llm.types import Request, Response, answer_prefill

__all__ = ["Client", "Request", "Response", "answer_prefill", "label_distribution", "open_client"]
