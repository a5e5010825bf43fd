"""Batch inference with LLMs on raylite Data (`raylite.data.llm`, Ray's `ray.data.llm`)."""
