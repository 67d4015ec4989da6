"""In-process llama.cpp (llama-cpp-python) on a GGUF file: the demo's CPU backend.

Requests are computed in the order of their rendered prompts, so that consecutive prompts share their
longest prefix and llama.cpp reuses its KV cache for it. Top-k log-probabilities are read from the last
position's logits while generating, which avoids `logits_all=True` (several times slower).
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from stressprobe.errors import StressprobeError, one_line_tail
from stressprobe.io import PACKAGE_PREFIX, package_file, user_cache_dir
from stressprobe.llm import system_turns
from stressprobe.llm.backends import backend_identity, chat_template_text
from stressprobe.llm.backends.base import Backend
from stressprobe.llm.cpu import (
    ProbeResult,
    advertised_amx,
    cached_probe,
    cpu_flags,
    decide_extra_buffers,
    probe_key,
    read_cpuinfo,
    run_probe,
)
from stressprobe.llm.failures import refusal
from stressprobe.llm.types import Request, Response

log = logging.getLogger(__name__)


def resolve_package_file(spec: str, config_key: str) -> Path:
    """A path, or the file `package:<module>/<file>` names in an installed package (not imported)."""
    if not spec.startswith(PACKAGE_PREFIX):
        return Path(spec)
    return package_file(spec, f"config {config_key}")


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """The text up to (not including) the first stop string, as the OpenAI API returns it."""
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(cuts)] if cuts else text


def gguf_identity(path: Path) -> dict[str, Any]:
    """The model's identity in cache keys: file name and size, not its location on this machine."""
    return {"backend": "llamacpp", "gguf": path.name, "size": path.stat().st_size}


# Settings that change the numbers llama.cpp computes, hence the answers: part of the identity when set
# (absent when off, so keys written before they existed stay valid).
NUMERIC_SETTINGS = ("convert", "flash_attn")


def llamacpp_identity(name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The registry entry's identity: its GGUF file and the settings that change the numbers."""
    identity = gguf_identity(gguf_path(name, entry))
    identity.update({key: entry[key] for key in NUMERIC_SETTINGS if entry.get(key)})
    return identity


# `convert` targets: llama.cpp's own file types (llama_ftype).
CONVERT_FTYPES = {
    "f32": "LLAMA_FTYPE_ALL_F32",
    "f16": "LLAMA_FTYPE_MOSTLY_F16",
    "bf16": "LLAMA_FTYPE_MOSTLY_BF16",
    "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
}


# A child process converts, so that llama.cpp's log (a line per tensor, on the C stderr) stays out of the job's
# terminal and reaches the error message when the conversion fails.
CONVERT_CODE = """
import ctypes, sys, llama_cpp
params = llama_cpp.llama_model_quantize_default_params()
params.ftype = getattr(llama_cpp, sys.argv[3])
params.allow_requantize = True  # the source may be quantised already (e.g. Q4_1 -> F16)
sys.exit(llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(params)))
"""


def converted_gguf(path: Path, target: str, cache_dir: Path | None = None) -> Path:
    """`path` with its weights rewritten as `target` by llama.cpp's own quantize routine, once per file and build.

    Why: llama.cpp has no fast batched matrix kernel for some file types; Q4_1 prompts run at ~300 tokens/s on
    2 cores here, the same weights in F16 at ~560 (bench/RESULTS.md). The file is written under a temporary
    name and renamed into place, so a concurrent job never loads half of it.
    """
    import llama_cpp

    cache_dir = cache_dir or user_cache_dir("gguf")
    size = path.stat().st_size
    target_path = cache_dir / f"{path.stem}.{size}.llama-cpp-{llama_cpp.__version__}.{target}.gguf"
    if target_path.is_file():
        return target_path
    cache_dir.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f".{target_path.name}.")
    os.close(handle)
    try:
        argv = [sys.executable, "-c", CONVERT_CODE, str(path), tmp, CONVERT_FTYPES[target]]
        child = subprocess.run(argv, capture_output=True, text=True, errors="replace")
        if child.returncode != 0:
            tail = one_line_tail(child.stderr, 3)
            raise StressprobeError(
                f"llama.cpp could not convert {path} to {target} (exit {child.returncode}): {tail}"
            )
        os.replace(tmp, target_path)
        log.info("converted %s to %s: %s", path.name, target, target_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target_path


def runtime_gguf(name: str, entry: Mapping[str, Any]) -> Path:
    """The GGUF file a job loads: the registry's, converted first when the entry says `convert`."""
    path = gguf_path(name, entry)
    return converted_gguf(path, entry["convert"]) if entry.get("convert") else path


def gguf_path(name: str, entry: Mapping[str, Any]) -> Path:
    """The registry entry's GGUF file; a missing one is a config error."""
    path = resolve_package_file(str(entry.get("gguf", "")), f"models.{name}.gguf")
    if not path.is_file():
        raise StressprobeError(
            f"config models.{name}.gguf: GGUF file not found: {path}; "
            "fix the path or install the package that ships it"
        )
    return path


# The probe child loads the model with llama.cpp's defaults (extra buffer types on) and runs a prompt and
# one decoding step, the two kinds of matrix multiplication a job runs; only llama_cpp is imported there.
PROBE_CODE = """
import sys, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=256, n_threads=int(sys.argv[2]), verbose=False)
tokens = llm.tokenize(b"The quick brown fox jumps over the lazy dog. " * 4)
llm.eval(tokens)
llm.eval(tokens[:1])
"""


def _library_identity() -> list[str]:
    """Which llama.cpp build is loaded (version, shared library file): a rebuild is probed anew."""
    import llama_cpp

    library = Path(getattr(getattr(llama_cpp.llama_cpp, "_lib", None), "_name", "") or "")
    stat = library.stat() if library.is_file() else None
    return [llama_cpp.__version__, str(library), str(stat and (stat.st_size, stat.st_mtime_ns))]


def probe_extra_buffers(path: Path, n_threads: int) -> ProbeResult:
    """Run the model with extra buffer types in a child process (cached per host, build and model file)."""
    key = probe_key(
        platform.node(),
        sorted(cpu_flags(read_cpuinfo())),
        *_library_identity(),
        path.name,
        path.stat().st_size,
    )
    argv = [sys.executable, "-c", PROBE_CODE, str(path), str(n_threads)]
    return cached_probe(key, lambda: run_probe(argv))


def llama_model_overrides(name: str, entry: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The llama model parameters to set before loading `entry`'s GGUF, decided once per machine.

    `{}` keeps llama.cpp's defaults (extra buffer types such as AMX and weight repacking on, the fast
    path); `{"use_extra_bufts": False}` where the registry entry says `extra_buffers: off`, or where it says
    `auto` and the CPU advertises AMX but a probe child died running it (see stressprobe.llm.cpu). Apply
    the result with `model_params_override` around the `Llama(...)` call; a server launcher can do the same.
    """
    setting = entry.get("extra_buffers", "auto")
    threads = int(entry.get("n_threads", 2))
    amx = advertised_amx(cpu_flags(read_cpuinfo()))
    try:
        decision = decide_extra_buffers(setting, amx, lambda: probe_extra_buffers(path, threads))
    except StressprobeError as exc:
        raise StressprobeError(f"config models.{name}.{exc}") from None
    log.info(
        "%s: llama.cpp extra buffer types %s (%s)", name, "on" if decision.enabled else "off", decision.reason
    )
    return {} if decision.enabled else {"use_extra_bufts": False}


@contextlib.contextmanager
def model_params_override(overrides: Mapping[str, Any]) -> Iterator[None]:
    """`llama_cpp.Llama(...)` calls inside the block load with these llama_model_params fields set.

    llama-cpp-python's `Llama()` takes no argument for some fields (e.g. `use_extra_bufts`); it starts
    from `llama_model_default_params()`, so the block wraps that function. A field this build of
    llama-cpp-python does not know is an error rather than a silently ignored attribute.
    """
    import llama_cpp.llama_cpp as native

    original = native.llama_model_default_params
    known = {field for field, _ in native.llama_model_params._fields_}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise StressprobeError(
            f"this llama-cpp-python has no model parameter {', '.join(unknown)}; "
            "install the version in constraints.txt"
        )

    def with_overrides() -> Any:
        params = original()
        for field, value in overrides.items():
            setattr(params, field, value)
        return params

    native.llama_model_default_params = with_overrides
    try:
        yield
    finally:
        native.llama_model_default_params = original


def open_backend(name: str, entry: dict[str, Any]) -> LlamaCppBackend:
    """Check the GGUF file and load it once, with extra buffer types where they are safe."""
    path = runtime_gguf(name, entry)
    return LlamaCppBackend(
        name,
        path,
        backend_identity(name, entry),
        n_ctx=int(entry.get("n_ctx", 2048)),
        n_threads=int(entry.get("n_threads", 2)),
        flash_attn=bool(entry.get("flash_attn", False)),
        model_overrides=llama_model_overrides(name, entry, path),
        chat_template=chat_template_text(name, entry) if entry.get("chat_template") else None,
        system_role=entry.get("system_role", "auto"),
    )


class LlamaCppBackend(Backend):
    """One loaded GGUF model answering requests one at a time, in shared-prefix order."""

    kind = "llamacpp"

    def __init__(
        self,
        name: str,
        path: Path,
        identity: dict[str, Any],
        n_ctx: int,
        n_threads: int,
        flash_attn: bool = False,
        model_overrides: Mapping[str, Any] | None = None,
        chat_template: str | None = None,
        system_role: str = "auto",
    ) -> None:
        super().__init__(name, identity)
        import llama_cpp  # imported here: loading the native library is not free

        self.model_id = identity.get("gguf", path.name)  # the registry's file, not a converted copy

        self._llama_cpp = llama_cpp
        try:
            with model_params_override(model_overrides or {}):
                self.llm = llama_cpp.Llama(
                    model_path=str(path),
                    n_ctx=n_ctx,
                    n_threads=n_threads,
                    flash_attn=flash_attn,
                    verbose=False,
                    seed=0,
                )
        except ValueError as exc:
            raise StressprobeError(
                f"config models.{name}.gguf: cannot load {path} ({exc}); is it a GGUF file?"
            ) from None
        self._formatter = llama_cpp.llama_chat_format.Jinja2ChatFormatter(
            template=chat_template or self.llm.metadata["tokenizer.chat_template"],
            eos_token=self.llm._model.token_get_text(self.llm.token_eos()),
            bos_token=self.llm._model.token_get_text(self.llm.token_bos()),
        )
        self._vocab = self.llm._model.vocab
        self._pieces: dict[int, str] = {}
        self.fold_system = system_turns.folds(name, system_role, lambda m: self._formatter(messages=m))

    def conversation(self, request: Request) -> list[dict[str, str]]:
        """The request's messages as the template gets them: system turns folded where the model needs it."""
        messages = request.message_dicts()
        return system_turns.fold_system_turns(messages) if self.fold_system else messages

    def render(self, request: Request) -> str:
        """The prompt text the chat template makes of the request (what llama.cpp actually sees).

        A prefilled answer follows the assistant turn's opening as plain text, so the model continues it.
        """
        messages = self.conversation(request)
        if request.prefill is None:
            return self._formatter(messages=messages).prompt
        return self._formatter(messages=messages[:-1]).prompt + request.prefill

    def order(self, requests: list[Request]) -> list[int]:
        """Sorted by rendered prompt: neighbours share their longest common prefix."""
        rendered = [self.render(r) for r in requests]
        return sorted(range(len(requests)), key=rendered.__getitem__)

    def complete(self, requests: list[Request]) -> list[Response]:
        return [self._complete_one(r) for r in requests]

    def _complete_one(self, request: Request) -> Response:
        tokens = self.llm.tokenize(self.render(request).encode("utf-8"), add_bos=False, special=True)
        if len(tokens) + request.max_tokens > self.llm.n_ctx():
            # Fails on every rerun: the job stops (stressprobe.llm.failures), the answers before it are cached.
            raise refusal(
                self.name,
                self.model_id,
                "context",
                f"a prompt of {len(tokens)} tokens + max_tokens {request.max_tokens} exceeds n_ctx {self.llm.n_ctx()}",
                key="n_ctx",
                fix=f"raise models.{self.name}.n_ctx (up to the model's context length) or shorten the inputs",
            )
        # At temperature 0 every sample is the greedy one: compute it once and repeat it.
        samples = 1 if request.temperature == 0 else request.n
        texts, top_logprobs, completion_tokens = [], None, 0
        for i in range(samples):
            text, n_generated, logprobs = self._sample(
                tokens, request, seed=request.seed + i, want_logprobs=i == 0
            )
            texts.append(text)
            completion_tokens += n_generated
            top_logprobs = logprobs if i == 0 else top_logprobs
        return Response(
            texts=texts * (request.n // samples),
            top_logprobs=top_logprobs if request.logprobs else None,
            prompt_tokens=len(tokens),
            completion_tokens=completion_tokens,
        )

    def _sample(
        self, tokens: list[int], request: Request, seed: int, want_logprobs: bool
    ) -> tuple[str, int, list[dict[str, float]]]:
        """One sample: (text, generated token count, top-k logprobs per generated token)."""
        self.llm.set_seed(seed)
        generated: list[int] = []
        logprobs: list[dict[str, float]] = []
        # top_k=0, min_p=0: no extra truncation by llama.cpp, plain nucleus sampling as in the OpenAI API.
        for token in self.llm.generate(
            tokens, temp=request.temperature, top_p=request.top_p, top_k=0, min_p=0.0, repeat_penalty=1.0
        ):
            if self._llama_cpp.llama_vocab_is_eog(self._vocab, token):
                break
            if want_logprobs and request.logprobs:
                logprobs.append(self._top_logprobs(request.logprobs))
            generated.append(token)
            if request.stop and any(s in self._detokenize(generated) for s in request.stop):
                break
            if len(generated) >= request.max_tokens:
                break
        return truncate_at_stop(self._detokenize(generated), request.stop), len(generated), logprobs

    def _detokenize(self, tokens: list[int]) -> str:
        return self.llm.detokenize(tokens).decode("utf-8", errors="replace")

    def _top_logprobs(self, k: int) -> dict[str, float]:
        """Top-k log-softmax of the logits that produced the token just sampled."""
        pointer = self._llama_cpp.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        logits = np.ctypeslib.as_array(pointer, shape=(self.llm.n_vocab(),)).astype(np.float64)
        top = np.argpartition(logits, -k)[-k:]
        shift = logits.max()
        log_norm = shift + np.log(np.exp(logits - shift).sum())
        result: dict[str, float] = {}
        for token_id in top[np.argsort(-logits[top])]:
            piece = self._piece(int(token_id))
            # Two ids can print the same (e.g. byte fallbacks): their probabilities add up.
            value = float(logits[token_id] - log_norm)
            result[piece] = float(np.logaddexp(result[piece], value)) if piece in result else value
        return result

    def _piece(self, token_id: int) -> str:
        if token_id not in self._pieces:
            self._pieces[token_id] = self._detokenize([token_id])
        return self._pieces[token_id]

    def close(self) -> None:
        self.llm.close()
