import pytest

import raylite
from tests.api_fixtures import start_api_cluster


@pytest.fixture(scope="module")
def api():
    """A local cluster for the module, with its HTTP API on a free port."""
    yield start_api_cluster()
    raylite.shutdown()
