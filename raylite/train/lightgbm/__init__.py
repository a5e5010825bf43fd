"""raylite.train.lightgbm: LightGBMTrainer, its callback and network parameters (Ray's names)."""

from raylite.train.lightgbm._lightgbm_utils import RayTrainReportCallback
from raylite.train.lightgbm._pandas import normalize_pandas_for_lightgbm
from raylite.train.lightgbm.config import LightGBMConfig, get_network_params
from raylite.train.lightgbm.lightgbm_checkpoint import LightGBMCheckpoint
from raylite.train.lightgbm.lightgbm_trainer import LightGBMTrainer

__all__ = [
    "LightGBMCheckpoint",
    "LightGBMConfig",
    "LightGBMTrainer",
    "RayTrainReportCallback",
    "get_network_params",
    "normalize_pandas_for_lightgbm",
]
