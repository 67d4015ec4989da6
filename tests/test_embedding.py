"""Embedding model location, one-time extraction, normalisation, and the shipped all-MiniLM-L6-v2."""

import importlib.util
import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from stressprobe.bert_encoder import BertMeanPooling, load_bert_mean_pooling
from stressprobe.embedding import (
    Embedder,
    extract_once,
    load_embedder,
    load_vectors,
    mean_pooling_max_length,
    resolve_model_dir,
    save_vectors,
)
from stressprobe.errors import StressprobeError
from stressprobe.io import package_file


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """An importable package whose import fails loudly, with a zipped model folder inside."""
    package = tmp_path / "site" / "loud_model_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    with zipfile.ZipFile(package / "model.zip", "w") as archive:
        archive.writestr("modules.json", "[]")
        archive.writestr("config.json", "{}")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return package


def test_package_file_is_located_without_importing(fake_package):
    assert package_file("package:loud_model_pkg/model.zip", "test") == fake_package / "model.zip"
    assert "loud_model_pkg" not in sys.modules
    with pytest.raises(StressprobeError, match="'no_such_pkg_xyz' is not installed"):
        package_file("package:no_such_pkg_xyz/model.zip", "test")
    with pytest.raises(StressprobeError, match="does not exist in the installed package"):
        package_file("package:loud_model_pkg/other.zip", "test")


def test_zip_is_extracted_once(fake_package, tmp_path):
    cache = tmp_path / "cache"
    first = resolve_model_dir("package:loud_model_pkg/model.zip", cache)
    assert (first / "modules.json").is_file()
    marker = first / "marker"
    marker.write_text("kept")
    assert resolve_model_dir("package:loud_model_pkg/model.zip", cache) == first
    assert marker.exists()  # not re-extracted
    assert [p.name for p in cache.iterdir()] == [first.name]  # no temporary folders left behind


def test_changed_zip_gets_a_new_folder(tmp_path):
    path = tmp_path / "m.zip"
    for content in ("{}", '{"x": 1}'):
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("wrapped/config.json", content)
        extract_once(path, tmp_path / "cache")
    assert len(list((tmp_path / "cache").iterdir())) == 2
    folder = resolve_model_dir(str(path), tmp_path / "cache")
    assert folder.name == "wrapped"  # a single wrapping folder is looked into


def test_not_a_model_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(StressprobeError, match="not a sentence-transformers model folder"):
        resolve_model_dir(str(tmp_path / "empty"))
    with pytest.raises(StressprobeError, match="does not exist; fix 'embedding.model'"):
        resolve_model_dir(str(tmp_path / "nope"))


class FakeModel:
    def get_sentence_embedding_dimension(self):
        return 2

    def encode(self, texts, **kwargs):
        return np.array([[len(t), 0.0] if t else [0.0, 0.0] for t in texts]) + np.array([0.0, 3.0])


def test_embedder_normalises():
    vectors = Embedder(FakeModel()).embed(["abcd", ""])
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert np.allclose(vectors[0], np.array([4, 3]) / 5)
    assert Embedder(FakeModel()).embed([]).shape == (0, 2)


def test_vectors_round_trip(tmp_path):
    vectors = np.arange(6, dtype=np.float32).reshape(3, 2)
    save_vectors(tmp_path / "e.npy", vectors)
    assert np.array_equal(load_vectors(tmp_path / "e.npy", 3), vectors)
    with pytest.raises(StressprobeError, match="3 vectors for 4 texts"):
        load_vectors(tmp_path / "e.npy", 4)


@pytest.mark.slow
def test_shipped_minilm_embeds_offline():
    embedder = load_embedder("package:all_minilm_l6_v2/model.zip")
    vectors = embedder.embed(
        ["a doctor treating patients", "medicine and health care", "football match results"]
    )
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarities = vectors @ vectors.T
    assert similarities[0, 1] > similarities[0, 2]


ST = "sentence_transformers.models."
MEAN_POOLING = {
    "word_embedding_dimension": 4,
    "pooling_mode_cls_token": False,
    "pooling_mode_mean_tokens": True,
}


BERT_NORMALIZER = {
    "type": "BertNormalizer",
    "clean_text": True,
    "handle_chinese_chars": True,
    "strip_accents": None,
    "lowercase": True,
}


def write_model_configs(folder, changes):
    """A folder holding only the JSON configs of a mean-pooling BERT model, with `changes` ({file: content})."""
    configs = {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": f"{ST}Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": f"{ST}Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": f"{ST}Normalize"},
        ],
        "1_Pooling/config.json": MEAN_POOLING,
        "sentence_bert_config.json": {"max_seq_length": 128, "do_lower_case": False},
        "config_sentence_transformers.json": {"__version__": {}, "prompts": {}, "default_prompt_name": None},
        "config.json": {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"},
        "tokenizer.json": {"normalizer": BERT_NORMALIZER},
        "tokenizer_config.json": {"do_lower_case": True, "tokenizer_class": "BertTokenizer"},
        "model.safetensors": b"",  # only its presence is read here
        **changes,
    }
    for name, content in configs.items():
        (folder / name).unlink(missing_ok=True)
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (folder / name).write_bytes(content)
        elif content is not None:  # None: the file is absent
            (folder / name).write_text(json.dumps(content))
    return folder


def test_mean_pooling_bert_takes_the_fast_path(tmp_path):
    assert mean_pooling_max_length(write_model_configs(tmp_path, {})) == 128
    without_normalize = {"modules.json": json.loads((tmp_path / "modules.json").read_text())[:2]}
    assert mean_pooling_max_length(write_model_configs(tmp_path, without_normalize)) == 128


NOT_EXACT = {  # changes to the mean-pooling folder that sentence-transformers computes differently
    "mean-and-cls": {"1_Pooling/config.json": {**MEAN_POOLING, "pooling_mode_cls_token": True}},
    "cls": {
        "1_Pooling/config.json": {
            **MEAN_POOLING,
            "pooling_mode_mean_tokens": False,
            "pooling_mode_cls_token": True,
        }
    },
    "pooling-mode-key": {"1_Pooling/config.json": {"word_embedding_dimension": 4, "pooling_mode": "mean"}},
    "lower-case": {"sentence_bert_config.json": {"max_seq_length": 128, "do_lower_case": True}},
    "no-max-length": {"sentence_bert_config.json": {"do_lower_case": False}},
    "other-transformer-setting": {
        "sentence_bert_config.json": {"max_seq_length": 128, "transformer_task": "x"}
    },
    "default-prompt": {
        "config_sentence_transformers.json": {"prompts": {"q": "q: "}, "default_prompt_name": "q"}
    },
    "truncate-dim": {"config_sentence_transformers.json": {"truncate_dim": 2}},
    "not-bert": {"config.json": {"model_type": "t5"}},
    "tanh-gelu": {"config.json": {"model_type": "bert", "hidden_act": "gelu_new"}},
    "relative-positions": {
        "config.json": {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "relative_key"}
    },
    "pytorch-weights-only": {"model.safetensors": None, "pytorch_model.bin": b""},
    "no-tokenizer-json": {"tokenizer.json": None},
    "tokenizer-config-cased": {"tokenizer_config.json": {"do_lower_case": False}},
    "tokenizer-config-strips-accents": {"tokenizer_config.json": {"strip_accents": True}},
    "other-tokenizer-class": {"tokenizer_config.json": {"tokenizer_class": "XLMRobertaTokenizer"}},
    "other-normalizer": {"tokenizer.json": {"normalizer": {"type": "NFKC"}}},
    "adapter": {"adapter_config.json": {}},
    "dense": {
        "modules.json": [
            {"path": "", "type": f"{ST}Transformer"},
            {"path": "1_Pooling", "type": f"{ST}Pooling"},
            {"path": "2_Dense", "type": f"{ST}Dense"},
        ]
    },
    "transformer-in-subfolder": {
        "modules.json": [
            {"path": "0_Transformer", "type": f"{ST}Transformer"},
            {"path": "1_Pooling", "type": f"{ST}Pooling"},
        ]
    },
}


@pytest.mark.parametrize("changes", NOT_EXACT.values(), ids=NOT_EXACT.keys())
def test_any_other_pipeline_falls_back_to_sentence_transformers(tmp_path, changes):
    assert mean_pooling_max_length(write_model_configs(tmp_path, changes)) is None


@pytest.fixture(scope="module")
def minilm_folder():
    if importlib.util.find_spec("all_minilm_l6_v2") is None:
        pytest.skip("the all_minilm_l6_v2 package (the default embedding model) is not installed")
    return resolve_model_dir("package:all_minilm_l6_v2/model.zip")


def sentence_transformer_vectors(folder, texts):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu").encode(
        texts, batch_size=2, normalize_embeddings=True
    )


@pytest.mark.slow
def test_fast_path_gives_sentence_transformers_vectors(minilm_folder):
    from tokenizers import Tokenizer

    embedder = load_embedder(str(minilm_folder), batch_size=2)
    assert isinstance(embedder.model, BertMeanPooling)
    long_text = " ".join(f"term{i}" for i in range(120))  # ~320 tokens
    untruncated = Tokenizer.from_file(str(minilm_folder / "tokenizer.json"))
    untruncated.no_truncation()
    assert len(untruncated.encode(long_text).ids) > embedder.model.max_length
    # batches of 2 mix lengths, so padding is masked out of the mean
    texts = [
        "a doctor",
        "medicine and health care for the elderly in rural areas",
        "",
        long_text,
        "Fußball ⚽",
        "Crème brûlée, 北京, naïve",
    ]
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32
    assert np.abs(vectors - sentence_transformer_vectors(minilm_folder, texts)).max() < 1e-5
    assert embedder.embed([]).shape == (0, 384)


@pytest.mark.slow
def test_cls_pooling_goes_through_sentence_transformers(minilm_folder, tmp_path):
    from sentence_transformers import SentenceTransformer

    for item in minilm_folder.iterdir():
        if item.name != "1_Pooling":
            (tmp_path / item.name).symlink_to(item)
    pooling = json.loads((minilm_folder / "1_Pooling" / "config.json").read_text())
    (tmp_path / "1_Pooling").mkdir()
    cls = {**pooling, "pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(cls))
    embedder = load_embedder(str(tmp_path), batch_size=2)
    assert isinstance(embedder.model, SentenceTransformer)
    texts = ["a doctor treating patients", "football match results"]
    vectors = embedder.embed(texts)
    assert np.abs(vectors - sentence_transformer_vectors(tmp_path, texts)).max() < 1e-5
    mean = load_embedder(str(minilm_folder)).embed(texts)
    assert np.abs(vectors - mean).max() > 1e-2  # the edited pooling is in effect


def test_weights_of_another_layout_are_not_run_in_numpy(minilm_folder, tmp_path):
    from safetensors.numpy import load_file, save_file

    for item in minilm_folder.iterdir():
        if item.name != "model.safetensors":
            (tmp_path / item.name).symlink_to(item)
    weights = load_file(str(minilm_folder / "model.safetensors"))
    save_file({f"bert.{key}": value for key, value in weights.items()}, str(tmp_path / "model.safetensors"))
    assert load_bert_mean_pooling(tmp_path, 256) is None
    assert isinstance(load_bert_mean_pooling(minilm_folder, 256), BertMeanPooling)


def test_an_embedding_job_does_not_import_torch(minilm_folder):
    """The point of the numpy encoder: an embedding process never pays torch's import."""
    code = (
        "import sys; from stressprobe.embedding import load_embedder; "
        f"load_embedder({str(minilm_folder)!r}, threads=1).embed(['a doctor']); "
        "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
