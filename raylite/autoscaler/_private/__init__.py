"""`ray.autoscaler._private`: the constants Ray's tools and tests read (constants.py)."""
