"""``raylite.train.v2.api``: Ray's v2 API module path (re-exports only)."""
