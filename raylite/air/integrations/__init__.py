"""`ray.air.integrations`: not in raylite yet."""
