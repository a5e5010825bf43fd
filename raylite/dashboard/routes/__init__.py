"""Route modules: each defines `routes(ctx) -> list[BaseRoute]` (see raylite/dashboard/__init__.py)."""
