"""Embedding model location, one-time extraction, normalisation, and the shipped all-MiniLM-L6-v2."""

import sys
import zipfile

import numpy as np
import pytest

from stressprobe.embedding import (
    Embedder,
    extract_once,
    load_embedder,
    load_vectors,
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
