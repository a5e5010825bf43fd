"""`ray.tune.execution`: the trial controller (pure) and the runner that carries it out."""
