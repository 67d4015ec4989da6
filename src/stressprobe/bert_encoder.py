"""A BERT encoder with mean pooling in numpy: all-MiniLM-L6-v2's sentence vectors without torch.

Every embedding job is a fresh process, and importing torch and transformers took ~5 s of the ~6 s such a
job ran on the demo's 2 cores (issue 11); numpy, the `tokenizers` library and `safetensors` load in ~0.3 s.
The forward pass is BERT's (post-LayerNorm, absolute positions, exact-erf GELU) in float32; its vectors
match sentence-transformers' within 1e-5 (tests/test_embedding.py). `stressprobe.embedding` decides which
folders it may run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

# Hugging Face's additive mask for padded keys: the most negative float32, so their softmax weight is 0.
MASKED = np.finfo(np.float32).min
LAYER_KEYS = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    variance = np.square(x - mean).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def gelu(x: np.ndarray) -> np.ndarray:
    """BERT's `gelu`: x·Φ(x) with the exact error function (not the tanh approximation)."""
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.float32(np.sqrt(2.0))))


def linear(x: np.ndarray, weights: dict[str, np.ndarray], name: str) -> np.ndarray:
    """The dense layer `name` (its weight already transposed to (in, out))."""
    return x @ weights[f"{name}.weight"] + weights[f"{name}.bias"]


def softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


class BertMeanPooling:
    """Token vectors of a BERT encoder averaged over the attention mask, as sentence-transformers'
    Transformer → mean Pooling pipeline computes them. Has the two methods of `SentenceTransformer` that the
    Embedder calls."""

    def __init__(self, tokenizer: Any, weights: dict[str, np.ndarray], config: dict, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        # dense weights are stored (out, in), as torch's Linear keeps them; transposed once for x @ W
        self.weights = dict(weights)
        for i in range(self.layers):
            for name in LAYER_KEYS:
                key = f"encoder.layer.{i}.{name}.weight"
                self.weights[key] = np.ascontiguousarray(weights[key].T)

    def get_sentence_embedding_dimension(self) -> int:
        return int(self.weights["embeddings.word_embeddings.weight"].shape[1])

    def encode(self, texts: list[str], batch_size: int, **_: Any) -> np.ndarray:
        """Vectors of `texts`, `batch_size` texts per forward pass, each truncated to `max_length` tokens."""
        pooled = []
        for start in range(0, len(texts), batch_size):
            encodings = self.tokenizer.encode_batch(texts[start : start + batch_size])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
            tokens = self.forward(ids, mask)
            weights = mask[..., None]
            pooled.append((tokens * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9))
        return np.concatenate(pooled).astype(np.float32)

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The last hidden state, (batch, tokens, hidden), of token ids whose padding `mask` marks 0."""
        w = self.weights
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        hidden = x.shape[-1]
        size = hidden // self.heads
        key_bias = ((1.0 - mask) * MASKED)[:, None, None, :]
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (
                linear(x, w, f"{p}attention.self.{n}")
                .reshape(batch, length, self.heads, size)
                .transpose(0, 2, 1, 3)
                for n in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(size)) + key_bias
            context = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
            x = layer_norm(
                linear(context, w, f"{p}attention.output.dense") + x,
                w[f"{p}attention.output.LayerNorm.weight"],
                w[f"{p}attention.output.LayerNorm.bias"],
                self.eps,
            )
            x = layer_norm(
                linear(gelu(linear(x, w, f"{p}intermediate.dense")), w, f"{p}output.dense") + x,
                w[f"{p}output.LayerNorm.weight"],
                w[f"{p}output.LayerNorm.bias"],
                self.eps,
            )
        return x


def required_weights(layers: int) -> set[str]:
    """The weight names of a BertModel with `layers` layers that the forward pass reads."""
    names = {
        f"embeddings.{n}.weight" for n in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    }
    names |= {"embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias"}
    per_layer = [*LAYER_KEYS, "attention.output.LayerNorm", "output.LayerNorm"]
    for i in range(layers):
        names |= {f"encoder.layer.{i}.{name}.{part}" for name in per_layer for part in ("weight", "bias")}
    return names


def load_bert_mean_pooling(folder: Path, max_length: int) -> BertMeanPooling | None:
    """The folder's encoder from `model.safetensors` and `tokenizer.json`; None if the weights are not a
    plain BertModel's (e.g. a checkpoint with a task head's key prefix)."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    weights = load_file(str(folder / "model.safetensors"))
    if not required_weights(int(config["num_hidden_layers"])) <= weights.keys():
        return None
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    # as transformers' tokenizer called with padding=True, truncation, max_length: pad to the longest text
    tokenizer.enable_truncation(max_length=max_length)
    padding = tokenizer.padding or {}
    tokenizer.enable_padding(pad_id=padding.get("pad_id", 0), pad_token=padding.get("pad_token", "[PAD]"))
    return BertMeanPooling(tokenizer, weights, config, max_length)
