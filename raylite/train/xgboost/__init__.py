"""raylite.train.xgboost: XGBoostTrainer and the callback its training loop uses (Ray's names)."""

from raylite.train.xgboost._xgboost_utils import RayTrainReportCallback
from raylite.train.xgboost.config import XGBoostConfig
from raylite.train.xgboost.xgboost_checkpoint import XGBoostCheckpoint
from raylite.train.xgboost.xgboost_trainer import XGBoostTrainer

__all__ = ["RayTrainReportCallback", "XGBoostCheckpoint", "XGBoostConfig", "XGBoostTrainer"]
