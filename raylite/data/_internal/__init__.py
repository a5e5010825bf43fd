"""Data internals: logical plan, planner, physical operators, streaming executor.

Nothing here is public API; ``raylite.data`` re-exports what users see.
"""
