"""The plan's searches as pure generators: bracketing and bisection of a rate, galloping
and bisection of a replica count, and the cost bound that prunes."""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.planning.search import max_rate, min_replicas


def drive(search: Generator, passes: Callable[[float], bool]) -> tuple[object, list]:
    probes = []
    try:
        point = next(search)
        while True:
            probes.append(point)
            point = search.send(passes(point))
    except StopIteration as done:
        return done.value, probes


@given(threshold=st.floats(0.05, 5000), start=st.floats(0.1, 1000))
@settings(deadline=None)  # a stalled machine is no failure of the search
def test_bisection_brackets_a_planted_threshold(threshold: float, start: float) -> None:
    answer, probes = drive(max_rate(start, 0.02, 0.01), lambda r: r <= threshold)
    assert answer.passing <= threshold < answer.failing
    assert answer.failing / answer.passing <= 1.02
    assert len(probes) < 30


def test_a_configuration_failing_everywhere_is_infeasible() -> None:
    answer, probes = drive(max_rate(4.0, 0.02, 0.5), lambda r: False)
    assert answer.passing is None and answer.failing == 0.5
    assert probes == [4.0, 2.0, 1.0, 0.5]


@given(needed=st.integers(1, 200))
@settings(deadline=None)  # a stalled machine is no failure of the search
def test_galloping_finds_the_fewest_replicas(needed: int) -> None:
    answer, probes = drive(min_replicas(256, lambda: 256), lambda k: k >= needed)
    assert answer.replicas == needed and answer.failing == needed - 1
    assert len(probes) <= 2 * needed.bit_length() + 1


def test_the_cost_bound_stops_the_gallop() -> None:
    answer, probes = drive(min_replicas(256, lambda: 6), lambda k: k >= 11)
    assert answer.replicas is None and answer.pruned
    assert probes == [1, 2, 4, 6]  # never past what could still beat the best


def test_no_count_up_to_the_limit_passes() -> None:
    answer, _ = drive(min_replicas(10, lambda: 256), lambda k: k >= 11)
    assert answer.replicas is None and not answer.pruned and answer.failing == 10


@pytest.mark.parametrize("bound", [1, 3, 8])
def test_a_tight_bound_still_finds_a_count_within_it(bound: int) -> None:
    answer, _ = drive(min_replicas(256, lambda: bound), lambda k: k >= 3)
    assert (answer.replicas == 3) == (bound >= 3)
