"""The tiny model of the Serve LLM tests (built once per session, nothing downloaded)."""

from tests.serve_llm.conftest import tiny_model  # noqa: F401 - a fixture
