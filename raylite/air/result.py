"""`ray.air.result`: Result under its older import path."""

from raylite.train import Result

__all__ = ["Result"]
