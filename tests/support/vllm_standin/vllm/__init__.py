"""A stand-in for the `vllm` package, for the workflow tests of what needs GPUs: models on several GPUs (tensor
parallelism, each served model on its own slice of the job's GPUs). Everything else runs real vLLM
(tests/support/vllm_real.py, vLLM's CPU build).

Put tests/support/vllm_standin on PYTHONPATH. Every engine load (`LLM(...)`) and every `chat` call appends a
JSON line to the file named by STRESSPROBE_VLLM_STANDIN_LOG, so a test can count model loads and requests
per job; each line carries the job's HF_HUB_OFFLINE and HF_HOME, so a test can check where the weights of a
real load would have come from. Every answer is the CDV one (``Answer: <A-D>``, from a hash of the prompt), or with
STRESSPROBE_VLLM_STANDIN_ROLES set (the rehearsal, tests/support/rehearsal.py) the role server's. A prompt of
more tokens than `max_model_len` (a token is 4 characters here) is refused as vLLM 0.32's `LLM.chat` refuses
it: the whole call raises VLLMValidationError. The OpenAI-compatible server (`vllm serve`,
entrypoints/cli/main.py) records its load in the same log, answers with the same `answer` function and
refuses such a prompt with HTTP 400.

Chat templates are applied as vLLM applies them (`render`: the template given as `chat_template`, else the
model folder's tokenizer_config.json one, rendered by jinja2 the way Hugging Face's `apply_chat_template`
does, `raise_exception` included), so a template that refuses a conversation (Gemma-2's refusal of a system
turn) fails the `chat` call as it would on a GPU. A model without a template (a test's made-up name) is
answered without rendering.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import jinja2
import jinja2.ext
import jinja2.sandbox


def answer(conversation) -> str:
    """The text the stand-in answers a conversation with; with STRESSPROBE_VLLM_STANDIN_ROLES set, the
    answer of the rehearsal's role server (each role in the format its prompt asks for)."""
    if os.environ.get("STRESSPROBE_VLLM_STANDIN_ROLES"):
        from tests.support.rehearsal import role_responder

        return role_responder({"messages": list(conversation)}, 0)
    prompt = "\n".join(m["content"] for m in conversation)
    return f"Answer: {'ABCD'[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 4]}"


def record(event: dict) -> None:
    path = os.environ.get("STRESSPROBE_VLLM_STANDIN_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            hub = {k.lower(): os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_HOME")}
            handle.write(json.dumps({**event, **hub, "pid": os.getpid()}) + "\n")


def prompt_tokens(conversation) -> int:
    """The stand-in's token count of a conversation."""
    return len("\n".join(m["content"] for m in conversation)) // 4


class VLLMValidationError(Exception):
    """As vllm.exceptions.VLLMValidationError: no ValueError."""


def load_template(chat_template: str | None, model: str | None) -> str | None:
    """The template text: `chat_template` (a file, else the text itself, as vLLM's load_chat_template), else
    the model folder's tokenizer_config.json `chat_template`, else None."""
    if chat_template:
        path = Path(chat_template)
        return path.read_text(encoding="utf-8") if path.is_file() else chat_template
    config = Path(str(model or "")) / "tokenizer_config.json"
    if config.is_file():
        return json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    return None


def raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def render(template: str, conversation, add_generation_prompt=True, continue_final_message=False) -> str:
    """The prompt a chat template makes of a conversation, with Hugging Face's jinja2 settings."""
    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    environment.globals["raise_exception"] = raise_exception
    text = environment.from_string(template).render(
        messages=conversation,
        add_generation_prompt=add_generation_prompt and not continue_final_message,
        bos_token="<s>",
        eos_token="</s>",
    )
    if continue_final_message:  # the prompt ends where the final message's text ends
        final = conversation[-1]["content"]
        text = text[: text.rindex(final) + len(final)]
    return text


class Tokenizer:
    """What `LLM.get_tokenizer()` returns, as far as chat templates go."""

    def __init__(self, template: str | None):
        self.chat_template = template

    def apply_chat_template(
        self, conversation, chat_template=None, tokenize=False, add_generation_prompt=True, **kwargs
    ):
        template = chat_template or self.chat_template
        if template is None:  # Hugging Face's refusal
            raise ValueError("Cannot use chat template functions because tokenizer.chat_template is not set")
        return render(
            template, conversation, add_generation_prompt, kwargs.get("continue_final_message", False)
        )


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class LLM:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.chat_template = load_template(kwargs.get("chat_template"), kwargs.get("model"))
        self.prompts: list[str] = []  # every rendered prompt, for the tests that read them
        record({"event": "load", "model": kwargs.get("model")})

    def get_tokenizer(self) -> Tokenizer:
        return Tokenizer(self.chat_template)

    def chat(
        self,
        conversations,
        sampling_params,
        use_tqdm=False,
        add_generation_prompt=True,
        continue_final_message=False,
        chat_template=None,
    ):
        template = load_template(chat_template, None) or self.chat_template
        if template is not None:  # rendered first: a refusal fails the whole call, as in vLLM
            self.prompts += [
                render(template, c, add_generation_prompt, continue_final_message) for c in conversations
            ]
        record({"event": "chat", "model": self.kwargs.get("model"), "requests": len(conversations)})
        limit = self.kwargs.get("max_model_len")
        for conversation in conversations:
            if limit is not None and prompt_tokens(conversation) > limit:
                raise VLLMValidationError(  # vLLM 0.32's wording
                    f"This model's maximum context length is {limit} tokens. However, your prompt contains "
                    f"{prompt_tokens(conversation)} input tokens, which exceeds this limit even without any "
                    "output tokens. Please reduce the length of the input prompt. "
                    f"(parameter=input_tokens, value={prompt_tokens(conversation)})"
                )
        outputs = []
        for conversation, params in zip(conversations, sampling_params, strict=True):
            samples = [
                SimpleNamespace(text=answer(conversation), token_ids=[1, 2, 3, 4], logprobs=None)
                for _ in range(params.kwargs.get("n") or 1)
            ]
            outputs.append(
                SimpleNamespace(outputs=samples, prompt_token_ids=[0] * prompt_tokens(conversation))
            )
        return outputs
