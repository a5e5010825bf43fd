"""`ray._raylet`: the names Ray's own documentation imports from it (`from ray._raylet import
ObjectRefGenerator`), so such programs run unchanged. Everything else of Ray's private module
has no counterpart here."""

from raylite._core.client.refs import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator

StreamingObjectRefGenerator = ObjectRefGenerator  # its name in Ray before 2.9

__all__ = ["DynamicObjectRefGenerator", "ObjectRef", "ObjectRefGenerator", "StreamingObjectRefGenerator"]
