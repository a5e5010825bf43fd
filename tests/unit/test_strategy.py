"""The typed scheduling Strategy and its wire form (raylite/_core/strategy.py)."""

import pytest

from raylite._core import strategy as ST
from raylite._core.strategy import Strategy


@pytest.mark.parametrize("strategy", [ST.DEFAULT, ST.SPREAD, Strategy.node("ab" * 16, True),
                                      Strategy.node("cd" * 16, False)])
def test_every_strategy_survives_its_wire_form(strategy):
    assert ST.decode(strategy.to_wire()) == strategy


def test_the_wire_forms_are_the_short_lists_specs_carry():
    assert ST.DEFAULT.to_wire() == []
    assert ST.SPREAD.to_wire() == ["SPREAD"]
    assert Strategy.node("ab" * 16, 1).to_wire() == ["NODE", "ab" * 16, True]


def test_decode_reads_a_node_affinity_without_soft_as_hard():
    how = ST.decode(["NODE", "ef" * 16])
    assert how.is_node and not how.soft and how.node_id == bytes.fromhex("ef" * 16)


def test_decode_passes_a_strategy_through_and_reads_nothing_as_default():
    assert ST.decode(ST.SPREAD) is ST.SPREAD
    assert ST.decode(None).is_default and ST.decode(()).is_default


def test_a_malformed_wire_strategy_is_named():
    with pytest.raises(ValueError, match="malformed scheduling strategy"):
        ST.decode(["PACK"])
    with pytest.raises(ValueError, match="unknown scheduling strategy kind"):
        Strategy("ANYWHERE")  # type: ignore[arg-type]
