"""``raylite.train.v2.torch``: Ray's v2 module path for the torch trainer (re-exports only)."""
