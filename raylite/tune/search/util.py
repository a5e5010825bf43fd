"""`ray.tune.search.util`: helpers shared by searchers."""

from raylite.tune.search.searcher import _set_search_properties_backwards_compatible

__all__ = ["_set_search_properties_backwards_compatible"]
