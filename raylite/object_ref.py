"""ObjectRef: the public name; the implementation lives with the Core's ref counting."""

from raylite._core.client.refs import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator

__all__ = ["DynamicObjectRefGenerator", "ObjectRef", "ObjectRefGenerator"]
