"""Ray's label selectors, checked with Ray's errors and matched as Ray matches them (pure)."""

from __future__ import annotations

import pytest

import raylite
from raylite._core import labels as L
from raylite.util.scheduling_strategies import In, NodeLabelSchedulingStrategy, NotIn


def test_selector_values_parse_to_in_and_not_in():
    assert L.parse_selector({"a": "x", "b": "!y", "c": "in(p, q)", "d": "!in(r,s)"}) == [
        ["a", "in", ["x"]], ["b", "!in", ["y"]], ["c", "in", ["p", "q"]], ["d", "!in", ["r", "s"]]]


def test_matching_follows_ray_not_in_matches_a_node_without_the_key():
    labels = {"zone": "a"}
    assert L.matches(L.parse_selector({"zone": "a"}), labels)
    assert not L.matches(L.parse_selector({"zone": "!a"}), labels)
    assert L.matches(L.parse_selector({"gpu": "!A100"}), labels)
    assert not L.matches(L.parse_selector({"gpu": "A100"}), labels)
    assert L.matches([["zone", "exists", []], ["gpu", "!exists", []]], labels)


@pytest.mark.parametrize("selector, fragment", [
    ({"-bad": "x"}, "Invalid label key name"),
    ({"ok": "in()"}, "Invalid label selector value"),
    ({"ok": "!!x"}, "Invalid label selector value"),
])
def test_invalid_selectors_are_refused_at_options_with_rays_message(selector, fragment):
    @raylite.remote
    def f():
        return 1

    with pytest.raises(ValueError, match=fragment):
        f.options(label_selector=selector)


def test_option_types_and_fallback_shape_are_checked():
    @raylite.remote
    def f():
        return 1

    with pytest.raises(TypeError, match="The type of keyword 'label_selector'"):
        f.options(label_selector=["zone"])
    with pytest.raises(ValueError, match="Each element in fallback_strategy must be a dictionary"):
        f.options(fallback_strategy=["zone"])
    with pytest.raises(ValueError, match="Unsupported option found: 'memory'"):
        f.options(fallback_strategy=[{"memory": 1}])


def test_node_label_strategy_checks_its_operators():
    with pytest.raises(ValueError, match="cannot both be empty"):
        NodeLabelSchedulingStrategy({})
    with pytest.raises(ValueError, match="must be one of the `In`, `NotIn`, `Exists` or `DoesNotExist`"):
        NodeLabelSchedulingStrategy({"zone": "a"})
    with pytest.raises(ValueError, match="non-empty"):
        In()
    with pytest.raises(ValueError, match="must be str"):
        NotIn(1)
