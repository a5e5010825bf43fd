"""raylite.experimental: Ray's `ray.experimental` names (the cluster key-value store so far)."""
