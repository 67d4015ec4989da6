import pytest

from tests.support.helpers import make_workdir


@pytest.fixture
def workdir(tmp_path):
    """A scratch working directory for an end-to-end workflow run."""
    return make_workdir(tmp_path / "work")
