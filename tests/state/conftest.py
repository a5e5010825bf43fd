import pytest

import raylite
from tests.api_fixtures import start_api_cluster


@pytest.fixture(scope="package")
def api():
    """One local cluster for tests/state, with its HTTP API on a free port."""
    yield start_api_cluster()
    raylite.shutdown()
