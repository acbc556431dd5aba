"""Pending requests of one engine scheduler, kept in policy order as they arrive.

Each queue gives the batch ``form_batch(order(pending, now), limits)`` would (see
:mod:`.batching`) without re-sorting every pending request for every batch: heaps with lazy
deletion, so queueing, withdrawing and taking a request cost O(log n). Requests must be pushed in
``seq`` order with non-decreasing ``enqueued_at`` (one scheduler's clock).

- ``fcfs``: one heap by ``seq``.
- ``critical_path``: aging lowers every waiting request's key by the same amount per millisecond,
  so a request's key is fixed when it arrives (``query_remaining_ms + slack + aging *
  enqueued_at``); a
  request with a deadline also waits in a heap by the time it becomes urgent, and moves to the
  urgent heap (earliest deadline first) when that time comes.
- ``depth``: a bucket per query (a heap by greatest depth, then arrival), buckets in a heap by
  their oldest pending request; a batch takes round after round over the buckets in that order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

from .policies import BatchLimits, PendingRequest


class _Fill:
    """A batch being filled under ``limits``, with :func:`form_batch`'s rules: the first request
    always goes in, one that does not fit is skipped, full at ``max_items``."""

    __slots__ = ("batch", "items", "max_items", "max_tokens", "skipped", "tokens")

    def __init__(self, limits: BatchLimits) -> None:
        self.batch: list[PendingRequest] = []
        self.items = 0
        self.tokens = 0
        self.max_items = limits.max_items
        self.max_tokens = limits.max_tokens
        self.skipped: list[Any] = []

    def offer(self, r: PendingRequest) -> bool:
        """Add ``r`` if it fits (or the batch is empty); False when it was skipped."""
        if self.batch and (
            self.items + r.items > self.max_items
            or (self.max_tokens is not None and self.tokens + r.tokens > self.max_tokens)
        ):
            return False
        self.batch.append(r)
        self.items += r.items
        self.tokens += r.tokens
        return True

    @property
    def full(self) -> bool:
        return self.items >= self.max_items


class PendingQueue:
    """Base: the live requests (``live``, by id: read it, never change it from outside) and
    their item count; subclasses order them."""

    def __init__(self) -> None:
        self.live: dict[int, PendingRequest] = {}
        self.items = 0
        self._stale = 0  # withdrawn requests whose heap entries are still there

    def __len__(self) -> int:
        return len(self.live)

    def __iter__(self) -> Iterator[PendingRequest]:
        return iter(list(self.live.values()))

    def __contains__(self, r: object) -> bool:
        return id(r) in self.live

    def push(self, r: PendingRequest) -> None:
        self.live[id(r)] = r
        self.items += r.items
        self._add(r)

    def remove(self, r: PendingRequest) -> bool:
        """Withdraw ``r`` (a cancelled caller); False if it is not pending."""
        if self.live.pop(id(r), None) is None:
            return False
        self.items -= r.items
        self._stale += 1
        if self._stale > 64 and self._stale > len(self.live):  # many withdrawn: rebuild
            self._reset()
            self._stale = 0
            for live in sorted(self.live.values(), key=lambda x: x.seq):
                self._add(live)
        return True

    def clear(self) -> None:
        self.live.clear()
        self.items = 0
        self._stale = 0
        self._reset()

    def oldest_enqueued(self) -> float:
        return min(r.enqueued_at for r in self.live.values())

    def take(self, limits: BatchLimits, now: float) -> list[PendingRequest]:
        """Remove and return the next batch."""
        fill = _Fill(limits)
        self._fill(fill, now)
        live = self.live
        for r in fill.batch:
            del live[id(r)]
        self.items -= fill.items
        self._settle(fill)
        return fill.batch

    # subclasses
    def _add(self, r: PendingRequest) -> None:
        raise NotImplementedError

    def _fill(self, fill: _Fill, now: float) -> None:
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError

    def _settle(self, fill: _Fill) -> None:
        """After the batch left the live set."""


def _fill_from_heap(
    heap: list[tuple], live: dict[int, PendingRequest], fill: _Fill, moved: set[int] | None = None
) -> None:
    """Pop entries (request last) in order into ``fill``; put skipped ones back. Entries of
    withdrawn requests (not live) and of ``moved`` ones are dropped."""
    skipped = []
    pop, batch, max_items, max_tokens = heapq.heappop, fill.batch, fill.max_items, fill.max_tokens
    items, tokens = fill.items, fill.tokens
    while heap and items < max_items:  # _Fill.offer, inlined: this loop is per request
        entry = pop(heap)
        r = entry[-1]
        if live.get(id(r)) is not r or (moved and id(r) in moved):
            continue
        if batch and (
            items + r.items > max_items
            or (max_tokens is not None and tokens + r.tokens > max_tokens)
        ):
            skipped.append(entry)
            continue
        batch.append(r)
        items += r.items
        tokens += r.tokens
    fill.items, fill.tokens = items, tokens
    for entry in skipped:
        heapq.heappush(heap, entry)


class FcfsQueue(PendingQueue):
    """Oldest request first."""

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[tuple[int, PendingRequest]] = []

    def _add(self, r: PendingRequest) -> None:
        heapq.heappush(self._heap, (r.seq, r))

    def _fill(self, fill: _Fill, now: float) -> None:
        _fill_from_heap(self._heap, self.live, fill)

    def _reset(self) -> None:
        self._heap = []


class CriticalPathQueue(PendingQueue):
    """The ``critical_path`` order (:class:`.batching.CriticalPathOrder`), incrementally."""

    def __init__(self, aging_ms_per_ms: float = 0.5) -> None:
        super().__init__()
        self.aging = aging_ms_per_ms
        self._reset()

    def _reset(self) -> None:
        self._normal: list[tuple] = []  # (aged key, -remaining, seq, r)
        self._urgent: list[tuple] = []  # (deadline, aged key, -remaining, seq, r)
        self._watch: list[tuple] = []  # (urgent at, seq, normal key): requests with a deadline
        self._moved: set[int] = set()  # ids of watched requests now in the urgent heap

    def remove(self, r: PendingRequest) -> bool:
        self._moved.discard(id(r))
        return super().remove(r)

    def _add(self, r: PendingRequest) -> None:
        query, own = r.query_remaining_ms, r.remaining_ms
        slack = max(0.0, query - own)
        key = (query + slack + self.aging * r.enqueued_at * 1e3, -own, r.seq, r)
        heapq.heappush(self._normal, key)
        if r.deadline is not None:
            heapq.heappush(self._watch, (r.deadline - own / 1e3, r.seq, key))

    def _fill(self, fill: _Fill, now: float) -> None:
        watch, live = self._watch, self.live
        while watch and watch[0][0] <= now:  # became urgent: earliest deadline first
            key = heapq.heappop(watch)[-1]
            r = key[-1]
            if live.get(id(r)) is r:
                self._moved.add(id(r))
                heapq.heappush(self._urgent, (r.deadline, *key))
        _fill_from_heap(self._urgent, live, fill)
        _fill_from_heap(self._normal, live, fill, self._moved)

    def _settle(self, fill: _Fill) -> None:
        if self._moved:
            self._moved.difference_update([id(r) for r in fill.batch])


class _Bucket:
    """One query's pending requests: by arrival (its oldest) and by (-depth, seq)."""

    __slots__ = ("arrivals", "head", "heap", "held")

    def __init__(self) -> None:
        self.arrivals: list[PendingRequest] = []
        self.head = 0  # index of the oldest request that may still be pending
        self.heap: list[tuple[int, int, PendingRequest]] = []
        self.held: int | None = None  # seq of the oldest request in the bucket order heap

    def oldest(self, live: dict[int, PendingRequest]) -> PendingRequest | None:
        arrivals = self.arrivals
        while self.head < len(arrivals) and live.get(id(arrivals[self.head])) is None:
            self.head += 1
        if self.head > 64 and self.head * 2 > len(arrivals):  # compact now and then
            del arrivals[: self.head]
            self.head = 0
        return arrivals[self.head] if self.head < len(arrivals) else None


class DepthQueue(PendingQueue):
    """The ``depth`` order (:func:`.batching.order_depth`), incrementally."""

    def __init__(self) -> None:
        super().__init__()
        self._reset()

    def _reset(self) -> None:
        self._buckets: dict[int, _Bucket] = {}
        self._order: list[tuple[float, int, int]] = []  # (oldest enqueued_at, its seq, query)
        self._visited: list[tuple[int, _Bucket]] = []

    def _add(self, r: PendingRequest) -> None:
        b = self._buckets.get(r.query_id)
        if b is None:
            b = self._buckets[r.query_id] = _Bucket()
        b.arrivals.append(r)
        heapq.heappush(b.heap, (-r.depth, r.seq, r))
        if b.held is None:
            b.held = r.seq
            heapq.heappush(self._order, (r.enqueued_at, r.seq, r.query_id))

    def _round(self, b: _Bucket, fill: _Fill) -> None:
        """Offer the bucket's requests at its greatest pending depth."""
        heap, live, top = b.heap, self.live, None
        while heap and not fill.full:
            entry = heap[0]
            r = entry[2]
            if live.get(id(r)) is not r:
                heapq.heappop(heap)
                continue
            if top is None:
                top = entry[0]
            elif entry[0] != top:
                return
            heapq.heappop(heap)
            if not fill.offer(r):
                fill.skipped.append((b, entry))

    def _fill(self, fill: _Fill, now: float) -> None:
        order, live, visited = self._order, self.live, []
        while order and not fill.full:
            _, seq, query = heapq.heappop(order)
            b = self._buckets.get(query)
            if b is None or b.held != seq:
                continue  # stale entry
            oldest = b.oldest(live)
            if oldest is None:
                del self._buckets[query]
                continue
            if oldest.seq != seq:  # its oldest was withdrawn: requeue under the true oldest
                b.held = oldest.seq
                heapq.heappush(order, (oldest.enqueued_at, oldest.seq, query))
                continue
            b.held = None
            visited.append((query, b))
            self._round(b, fill)
        while not fill.full and any(b.heap for _, b in visited):
            for _, b in visited:  # later rounds, same bucket order
                if fill.full:
                    break
                self._round(b, fill)
        for b, entry in fill.skipped:
            heapq.heappush(b.heap, entry)
        self._visited = visited

    def _settle(self, fill: _Fill) -> None:
        """Requeue the visited buckets under their (new) oldest request."""
        order, live = self._order, self.live
        for query, b in self._visited:
            oldest = b.oldest(live)
            if oldest is None:
                del self._buckets[query]
            else:
                b.held = oldest.seq
                heapq.heappush(order, (oldest.enqueued_at, oldest.seq, query))
        self._visited = []


def make_queue(policy: str, **options: float) -> PendingQueue:
    """The incremental queue of a policy name (``batching.POLICIES``)."""
    if policy == "fcfs":
        return FcfsQueue()
    if policy == "depth":
        return DepthQueue()
    if policy == "critical_path":
        return CriticalPathQueue(**options)
    from .policies import POLICIES

    raise ValueError(f"unknown batching policy {policy!r}; choose one of {POLICIES}")
