"""Tools for testing and benchmarking raylite itself (not needed to run programs).

`raylite.testing.node_sim` runs many simulated nodes in one process against a real head.
"""
