"""`raylite.util.annotations` (Ray's `ray.util.annotations`): the decorators libraries put on
their own APIs. Each keeps the object usable as before, notes its stability in the docstring,
tags it for API linters, and `Deprecated(warning=True)` warns on use, as Ray's do."""

from __future__ import annotations

import warnings

import pytest

import raylite.util
from raylite.util.annotations import (
    AnnotationType,
    Deprecated,
    DeveloperAPI,
    PublicAPI,
    RayDeprecationWarning,
    _get_annotation_type,
    _is_annotated,
)


def test_reachable_as_an_attribute_of_util():
    assert raylite.util.annotations.PublicAPI is PublicAPI


def test_public_api_bare_and_with_stability():
    @PublicAPI
    def stable(x):
        """Doubles x."""
        return 2 * x

    @PublicAPI(stability="beta", api_group="Tools")
    class Beta:
        """A beta class.

        More about it.
        """

    assert stable(3) == 6 and stable.__name__ == "stable"
    assert stable.__doc__ == "Doubles x."  # stable APIs keep their docstring as it is
    assert "**PublicAPI (beta):**" in Beta.__doc__
    assert "\n        **PublicAPI (beta):**" in Beta.__doc__  # at the docstring's indentation
    assert _get_annotation_type(stable) == "PublicAPI" and _get_annotation_type(Beta) == "PublicAPI"
    assert Beta._annotated_api_group == "Tools" and isinstance(Beta(), Beta)


def test_public_api_rejects_an_unknown_stability():
    with pytest.raises(ValueError, match="stability='experimental'.*'alpha', 'beta', 'stable'"):
        PublicAPI(stability="experimental")


def test_developer_api_with_and_without_parentheses():
    @DeveloperAPI
    def f():
        return "f"

    @DeveloperAPI()
    class C:
        pass

    assert f() == "f" and "**DeveloperAPI:**" in f.__doc__
    assert "**DeveloperAPI:**" in C.__doc__
    assert _get_annotation_type(f) == _get_annotation_type(C) == AnnotationType.DEVELOPER_API.value


def test_a_subclass_of_an_annotated_class_is_not_annotated_itself():
    @PublicAPI
    class Base:
        pass

    class Child(Base):
        pass

    assert _is_annotated(Base) and not _is_annotated(Child)


def test_deprecated_documents_but_does_not_warn_by_default():
    @Deprecated(message="Use new_f() instead.")
    def old_f():
        return 1

    @Deprecated
    class Old:
        pass

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert old_f() == 1 and isinstance(Old(), Old)
    assert ".. warning::" in old_f.__doc__ and "Use new_f() instead." in old_f.__doc__
    assert "**DEPRECATED**" in Old.__doc__
    assert _get_annotation_type(old_f) == "Deprecated"


def test_deprecated_with_warning_warns_on_each_kind_of_use():
    @Deprecated(message="Use g() instead.", warning=True)
    def old_f(a, b=2):
        return a + b

    @Deprecated(warning=True)
    class OldClass:
        def __init__(self, v):
            self.v = v

    @Deprecated(warning=True)
    class NoInit:
        pass

    class Holder:
        @Deprecated(message="Read .size.", warning=True)
        def method(self):
            return "m"

        @Deprecated(warning=True)
        @property
        def length(self):
            return 4

    with pytest.warns(RayDeprecationWarning, match="Use g\\(\\) instead") as record:
        assert old_f(1, b=5) == 6
    assert record[0].filename == __file__  # points at the caller, not at the decorator
    assert old_f.__name__ == "old_f" and old_f.__wrapped__(1) == 3
    with pytest.warns(RayDeprecationWarning):
        assert OldClass(7).v == 7
    assert isinstance(OldClass(1), OldClass) and OldClass.__name__ == "OldClass"
    with pytest.warns(RayDeprecationWarning):
        assert isinstance(NoInit(), NoInit)
    with pytest.warns(RayDeprecationWarning, match="Read .size."):
        assert Holder().method() == "m"
    with pytest.warns(RayDeprecationWarning):
        assert Holder().length == 4
    assert issubclass(RayDeprecationWarning, DeprecationWarning)


def test_deprecated_rejects_unknown_options():
    with pytest.raises(ValueError, match="unknown options \\['reason'\\]"):
        Deprecated(reason="x")
