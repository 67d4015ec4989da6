"""Tiny Hugging Face models built in tests (no download): for the DPO and LoRA paths on CPU."""

from __future__ import annotations


def toy_model_and_tokenizer(texts: list[str], classifier: bool = False):
    """A 2-layer random Llama (causal LM, or a 2-label sequence classifier) and a word-level tokenizer over
    the words of `texts`, with a minimal chat template."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        LlamaForSequenceClassification,
        PreTrainedTokenizerFast,
    )

    special = ["[UNK]", "[PAD]", "[BOS]", "[EOS]", "<user>", "<system>", "<assistant>"]
    pieces = sorted({piece for t in texts for piece, _ in pre_tokenizers.Whitespace().pre_tokenize_str(t)})
    vocab = {token: i for i, token in enumerate(special + [p for p in pieces if p not in special])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", bos_token="[BOS]", eos_token="[EOS]"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} [EOS] {% endfor %}"
        "{% if add_generation_prompt %}<assistant> {% endif %}"
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=vocab["[PAD]"],
        bos_token_id=vocab["[BOS]"],
        eos_token_id=vocab["[EOS]"],
        num_labels=2,
    )
    model = LlamaForSequenceClassification(config) if classifier else LlamaForCausalLM(config)
    return model, tokenizer
