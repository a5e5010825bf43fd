# Put first on PYTHONPATH by tests that need a node "without vLLM" (the fallback engine's tests).
raise ImportError("vllm is hidden by raylite's tests (tests/serve_llm/hide_vllm)")
