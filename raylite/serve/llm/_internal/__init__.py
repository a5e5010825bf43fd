"""Implementation of raylite.serve.llm: engines, the LLMServer and OpenAiIngress bodies, builders."""
