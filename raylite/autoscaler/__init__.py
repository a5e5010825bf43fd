"""raylite.autoscaler: Ray's `ray.autoscaler` names (the `sdk` module libraries call)."""
