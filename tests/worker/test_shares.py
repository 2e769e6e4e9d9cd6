"""A worker's queues share each claim by weight (postkit.worker.shares): the first queue of each
round by smooth weighted round robin, and each queue's part of the free slots."""

from __future__ import annotations

import pytest

from postkit.worker.shares import Shares


def firsts(shares: Shares, rounds: int) -> list[str]:
    return [shares.next_order()[0] for _ in range(rounds)]


def test_queues_weighing_3_and_1_go_first_3_rounds_in_4_spread_out() -> None:
    shares = Shares(["heavy", "light"], {"heavy": 3})

    assert firsts(shares, 8) == ["heavy", "heavy", "light", "heavy"] * 2


def test_equal_weights_rotate_the_first_queue_in_the_workers_order() -> None:
    shares = Shares(["a", "b", "c"])

    assert [shares.next_order() for _ in range(3)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
    ]


def test_a_queues_share_of_the_free_slots_is_its_part_of_the_weights_rounded_up() -> None:
    shares = Shares(["heavy", "light"], {"heavy": 3})

    assert [shares.share("heavy", free) for free in (1, 4, 32)] == [1, 3, 24]
    assert [shares.share("light", free) for free in (1, 4, 32)] == [1, 1, 8]


@pytest.mark.parametrize("weight", [0, 1001, 2.5, True, "3"])
def test_a_weight_that_is_not_an_int_from_1_to_1000_is_refused(weight: object) -> None:
    with pytest.raises(ValueError, match="queue 'heavy''s weight must be"):
        Shares(["heavy"], {"heavy": weight})  # type: ignore[dict-item]


def test_a_weight_for_a_queue_not_served_is_refused() -> None:
    with pytest.raises(
        ValueError, match="weights names queue\\(s\\) not served by the worker: 'other'"
    ):
        Shares(["heavy"], {"other": 2})
