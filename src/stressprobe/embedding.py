"""Sentence embeddings (all-MiniLM-L6-v2 by default) from a local folder, zip, or a file inside a package.

`package:<module>/<file>` locates a file shipped in an installed package without importing it (the
default model's package prints on import). A zip is extracted once into a cache directory; nothing is
downloaded (`HF_HUB_OFFLINE=1`).

A folder whose sentence-transformers pipeline is a plain BERT encoder followed by mean pooling (the default
model's) is run in numpy (`stressprobe.bert_encoder`): importing torch and transformers cost ~5 s per
process, and every embedding job is a fresh process (issue 11). Any other pipeline goes through
`SentenceTransformer`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from stressprobe.bert_encoder import load_bert_mean_pooling
from stressprobe.errors import StressprobeError
from stressprobe.io import PACKAGE_PREFIX, atomic_target, package_file, user_cache_dir

log = logging.getLogger(__name__)

MODEL_MARKERS = ("modules.json", "config_sentence_transformers.json", "config.json")
ST_MODULES = "sentence_transformers.models."
# Normalize changes nothing here: the Embedder scales every row to unit length anyway.
MEAN_POOLING_PIPELINES = (
    [f"{ST_MODULES}Transformer", f"{ST_MODULES}Pooling"],
    [f"{ST_MODULES}Transformer", f"{ST_MODULES}Pooling", f"{ST_MODULES}Normalize"],
)
# config_sentence_transformers.json keys that `encode` without a prompt name ignores; any other key must be null.
INERT_ST_SETTINGS = {"__version__", "prompts", "similarity_fn_name", "model_type"}
# tokenizer_config.json keys that transformers writes over tokenizer.json's BertNormalizer fields
TOKENIZER_OVERRIDES = {
    "do_lower_case": "lowercase",
    "strip_accents": "strip_accents",
    "tokenize_chinese_chars": "handle_chinese_chars",
}


def zip_fingerprint(zip_path: Path) -> str:
    """A short content key of a zip from its member names, sizes and CRCs (cheap: no decompression)."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(zip_path) as archive:
        for info in sorted(archive.infolist(), key=lambda i: i.filename):
            digest.update(f"{info.filename}\0{info.file_size}\0{info.CRC}\n".encode())
    return digest.hexdigest()[:16]


def model_folder(root: Path) -> Path:
    """The sentence-transformers folder inside `root` (the root itself or a single wrapping folder)."""
    for candidate in (root, *sorted(p for p in root.iterdir() if p.is_dir())):
        if any((candidate / marker).exists() for marker in MODEL_MARKERS):
            return candidate
    raise StressprobeError(
        f"{root}: not a sentence-transformers model folder (no modules.json or config.json)"
    )


def extract_once(zip_path: Path, cache_dir: Path) -> Path:
    """Extract `zip_path` into `cache_dir/<name>-<fingerprint>` unless already there.

    Extraction goes to a temporary sibling that is renamed into place, so concurrent jobs never see a
    half-extracted model; a job that loses the race discards its copy.
    """
    target = cache_dir / f"{zip_path.stem}-{zip_fingerprint(zip_path)}"
    if target.is_dir():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache_dir, prefix=f".{target.name}."))
    try:
        with zipfile.ZipFile(zip_path) as archive:
            archive.extractall(tmp)
        os.rename(tmp, target)
        log.info("extracted %s into %s", zip_path, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model_dir(spec: str, cache_dir: Path | None = None) -> Path:
    """A local sentence-transformers folder for a folder path, a zip, or a `package:` spec."""
    is_package = spec.startswith(PACKAGE_PREFIX)
    path = package_file(spec, "embedding model") if is_package else Path(spec)
    if not path.exists():
        raise StressprobeError(f"embedding model '{spec}': {path} does not exist; fix 'embedding.model'")
    if path.is_file() and zipfile.is_zipfile(path):
        path = extract_once(path, cache_dir or user_cache_dir("models"))
    return model_folder(path)


def read_json(path: Path) -> Any:
    """A JSON file's content, or None where the file does not exist."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def is_mean_pooling(pooling: dict[str, Any]) -> bool:
    """Whether a Pooling config (`pooling_mode_*` flags) averages the token embeddings and does nothing else."""
    flags = {key: value for key, value in pooling.items() if key != "word_embedding_dimension"}
    active = {key: value for key, value in flags.items() if value is not False}
    mean_only = active == {"pooling_mode_mean_tokens": True}
    return mean_only and all(key.startswith("pooling_mode_") for key in flags)


def is_plain_bert(folder: Path) -> bool:
    """Whether the folder's encoder is what `BertMeanPooling` computes: a BERT with absolute positions and
    exact GELU in `model.safetensors`, and a `tokenizer.json` whose normaliser the tokenizer config (which
    transformers applies over it) does not change."""
    config = read_json(folder / "config.json") or {}
    tokenizer = read_json(folder / "tokenizer.json") or {}
    normalizer = tokenizer.get("normalizer") or {}
    settings = read_json(folder / "tokenizer_config.json") or {}
    return (
        config.get("model_type") == "bert"
        and config.get("hidden_act") == "gelu"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and (folder / "model.safetensors").is_file()
        and normalizer.get("type") == "BertNormalizer"
        and settings.get("tokenizer_class") in (None, "BertTokenizer", "BertTokenizerFast")
        and all(
            settings.get(key, normalizer.get(n)) == normalizer.get(n)
            for key, n in TOKENIZER_OVERRIDES.items()
        )
    )


def mean_pooling_max_length(folder: Path) -> int | None:
    """The token limit of a folder that `BertMeanPooling` computes exactly as sentence-transformers does.

    That is: modules Transformer (the folder itself) → mean Pooling (→ Normalize), a plain BERT encoder
    (`is_plain_bert`), a `max_seq_length`, and no lower-casing, default prompt, truncated dimension or
    adapter. None for any other folder.
    """
    modules = read_json(folder / "modules.json") or []
    types = [module.get("type") for module in modules]
    if types not in MEAN_POOLING_PIPELINES or modules[0].get("path") != "":
        return None
    settings = read_json(folder / "sentence_bert_config.json") or {}
    st_settings = read_json(folder / "config_sentence_transformers.json") or {}
    max_length = settings.get("max_seq_length")
    exact = (
        is_mean_pooling(read_json(folder / modules[1].get("path", "") / "config.json") or {})
        and set(settings) <= {"max_seq_length", "do_lower_case"}
        and settings.get("do_lower_case", False) is False
        and isinstance(max_length, int)
        and all(key in INERT_ST_SETTINGS or value is None for key, value in st_settings.items())
        and is_plain_bert(folder)
        and not (folder / "adapter_config.json").exists()
    )
    return max_length if exact else None


class Embedder:
    """Turns texts into L2-normalised vectors (so a dot product is the cosine similarity)."""

    def __init__(self, model: Any, batch_size: int = 64) -> None:
        self.model = model
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape (len(texts), dim), each row of unit length."""
        if not texts:
            return np.zeros((0, self.model.get_sentence_embedding_dimension()), dtype=np.float32)
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return normalise(np.asarray(vectors, dtype=np.float32))


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)


def cuda_available() -> bool:
    """Whether torch is installed and sees a GPU (torch is imported only to ask)."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


DEVICES = ("cpu", "auto", "cuda")


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def check_weights(folder: Path, spec: str, sha256: str | None) -> None:
    """The model's weights file must have the pinned sha256 (`embedding.sha256`; null = unpinned)."""
    if sha256 is None:
        return
    weights = next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)
    if weights is None:
        raise StressprobeError(
            f"embedding model '{spec}': no {' or '.join(WEIGHT_FILES)} to check 'embedding.sha256' against"
        )
    actual = file_sha256(weights)
    if actual != sha256:
        raise StressprobeError(
            f"embedding model '{spec}': {weights.name} has sha256 {actual}, not the pinned {sha256} "
            "(config key 'embedding.sha256'); install the pinned weights or change the pin"
        )


def load_embedder(
    spec: str,
    batch_size: int = 64,
    cache_dir: Path | None = None,
    threads: int | None = None,
    device: str = "cpu",
    sha256: str | None = None,
) -> Embedder:
    """Load a sentence-transformers model offline (`threads` caps the math libraries' threads), its weights
    checked against `sha256` when given.

    `device`: `cpu`; `cuda` (sentence-transformers on the GPU); `auto` = `cuda` where torch sees a GPU,
    else `cpu` (a million-row pool job uses the GPU its job was given).
    """
    if device not in DEVICES:
        raise StressprobeError(
            f"config key 'embedding.pool_device': {device!r}; use one of {', '.join(DEVICES)}"
        )
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    folder = resolve_model_dir(spec, cache_dir)
    check_weights(folder, spec, sha256)
    if threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
    gpu = device == "cuda" or (device == "auto" and cuda_available())
    if gpu:
        from sentence_transformers import SentenceTransformer

        log.info("embedding on the GPU")
        return Embedder(SentenceTransformer(str(folder), device="cuda"), batch_size)
    max_length = mean_pooling_max_length(folder)
    if max_length is not None:
        model = load_bert_mean_pooling(folder, max_length)
        if model is not None:
            return Embedder(model, batch_size)
    import torch  # heavy imports, only for a model the numpy encoder does not run
    from sentence_transformers import SentenceTransformer

    if threads:
        torch.set_num_threads(threads)
    return Embedder(SentenceTransformer(str(folder), device="cpu"), batch_size)


def save_vectors(path: str | Path, vectors: np.ndarray) -> None:
    """Write an `.npy` file atomically (a temporary file renamed into place)."""
    with atomic_target(path) as tmp, open(tmp, "wb") as handle:
        np.save(handle, vectors)


def load_vectors(path: str | Path, rows: int, mmap: bool = False) -> np.ndarray:
    """Read an `.npy` file that must have `rows` rows (one per pool entry); `mmap` maps it read-only
    instead (a million-row pool's 1.5 GB are then read block by block)."""
    vectors = np.load(path, mmap_mode="r" if mmap else None)
    if vectors.ndim != 2 or vectors.shape[0] != rows:
        raise StressprobeError(f"{path}: {vectors.shape[0]} vectors for {rows} texts; delete it to recompute")
    return vectors
