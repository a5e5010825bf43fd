"""`ray.tune.trainable`: the Trainable class, the session functions and the wrappers."""

from raylite.tune.trainable.session import TuneContext, get_checkpoint, get_context, report
from raylite.tune.trainable.trainable import Trainable
from raylite.tune.trainable.util import with_parameters, with_resources

__all__ = ["Trainable", "TuneContext", "get_checkpoint", "get_context", "report",
           "with_parameters", "with_resources"]
