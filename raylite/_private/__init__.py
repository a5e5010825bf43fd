"""Names from Ray's private modules that Ray's own documentation examples import."""
