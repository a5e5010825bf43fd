"""``raylite.train.v2``: the module paths of Ray Train's current ("v2") API.

Ray's documentation imports some trainers from ``ray.train.v2...``; these
modules only re-export raylite's one implementation, so both paths name the
same classes.
"""
