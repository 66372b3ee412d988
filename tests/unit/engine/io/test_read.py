"""read_ahead: the same items in the same order, errors raised in the caller, a bounded lead, and a
producer that stops (and closes its source) when the caller stops early."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import closing

import pytest

from airflow_provider_iceberg_exec.engine.io.read import read_ahead


def test_yields_every_item_in_order() -> None:
    assert list(read_ahead(iter(range(1000)), depth=3)) == list(range(1000))
    assert list(read_ahead(iter([]), depth=3)) == []


def test_producer_error_is_raised_in_the_caller_after_the_items_before_it() -> None:
    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("corrupt file")

    items = read_ahead(failing(), depth=2)
    assert [next(items), next(items)] == [1, 2]
    with pytest.raises(ValueError, match="corrupt file"):
        next(items)


def test_the_producer_stays_at_most_depth_items_ahead() -> None:
    produced = 0
    lead: list[int] = []

    def counting() -> Iterator[int]:
        nonlocal produced
        for i in range(200):
            produced += 1
            yield i

    for consumed, _ in enumerate(read_ahead(counting(), depth=4), start=1):
        lead.append(produced - consumed)
    # Queue of 4, plus the one the producer holds while waiting for a slot.
    assert max(lead) <= 5


def test_closing_early_stops_the_producer_and_closes_the_source() -> None:
    closed = threading.Event()
    produced = 0

    def endless() -> Iterator[int]:
        nonlocal produced
        try:
            while True:
                produced += 1
                yield produced
        finally:
            closed.set()

    with closing(read_ahead(endless(), depth=2)) as items:
        assert next(items) == 1
        assert next(items) == 2
    assert closed.is_set()
    assert produced <= 5
    assert not [t for t in threading.enumerate() if t.name == "iceberg-exec-read-ahead"]


class _Sized:
    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def test_the_lead_is_bounded_in_bytes_but_one_big_item_always_passes() -> None:
    produced = 0
    lead: list[int] = []

    def sized() -> Iterator[_Sized]:
        nonlocal produced
        for i in range(100):
            produced += 1
            yield _Sized(1000 if i % 10 else 50_000)  # every tenth item is bigger than the budget

    for consumed, _ in enumerate(read_ahead(sized(), depth=50, max_bytes=3500), start=1):
        lead.append(produced - consumed)
    # At most 3 items of 1000 bytes queued, plus the one the producer holds while waiting.
    assert max(lead) <= 4
