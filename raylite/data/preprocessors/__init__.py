"""raylite.data.preprocessors (Ray's ``ray.data.preprocessors``): fit on a Dataset, transform lazily."""

from raylite.data.preprocessors.concatenator import Chain, Concatenator
from raylite.data.preprocessors.encoder import LabelEncoder, OneHotEncoder
from raylite.data.preprocessors.preprocessor import Preprocessor, PreprocessorNotFittedException
from raylite.data.preprocessors.scaler import MinMaxScaler, StandardScaler

__all__ = [
    "Chain",
    "Concatenator",
    "LabelEncoder",
    "MinMaxScaler",
    "OneHotEncoder",
    "Preprocessor",
    "PreprocessorNotFittedException",
    "StandardScaler",
]
