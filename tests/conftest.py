import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import make_workdir  # noqa: E402


@pytest.fixture
def workdir(tmp_path):
    """A scratch working directory for an end-to-end workflow run."""
    return make_workdir(tmp_path / "work")
