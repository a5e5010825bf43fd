"""raylite.data.preprocessors (Ray's ``ray.data.preprocessors``): fit on a Dataset, transform lazily."""

from raylite.data.preprocessors.concatenator import Chain, Concatenator
from raylite.data.preprocessors.discretizer import CustomKBinsDiscretizer, UniformKBinsDiscretizer
from raylite.data.preprocessors.encoder import (
    Categorizer,
    LabelEncoder,
    MultiHotEncoder,
    OneHotEncoder,
    OrdinalEncoder,
)
from raylite.data.preprocessors.imputer import SimpleImputer
from raylite.data.preprocessors.normalizer import Normalizer
from raylite.data.preprocessors.preprocessor import Preprocessor, PreprocessorNotFittedException
from raylite.data.preprocessors.scaler import (
    MaxAbsScaler,
    MinMaxScaler,
    RobustScaler,
    StandardScaler,
)
from raylite.data.preprocessors.text import (
    CountVectorizer,
    FeatureHasher,
    HashingVectorizer,
    Tokenizer,
)

__all__ = [
    "Categorizer",
    "Chain",
    "Concatenator",
    "CountVectorizer",
    "CustomKBinsDiscretizer",
    "FeatureHasher",
    "HashingVectorizer",
    "LabelEncoder",
    "MaxAbsScaler",
    "MinMaxScaler",
    "MultiHotEncoder",
    "Normalizer",
    "OneHotEncoder",
    "OrdinalEncoder",
    "Preprocessor",
    "PreprocessorNotFittedException",
    "RobustScaler",
    "SimpleImputer",
    "StandardScaler",
    "Tokenizer",
    "UniformKBinsDiscretizer",
]
