"""The one request batcher every server runs: concurrent requests gathered into batches, one batch at a time.

A single loop (`run`, started by the app's lifespan) takes the first waiting request, gathers whatever else
arrives within `wait_ms` until the batch holds `max_size` (counted by `size(item)`: 1 per request, or a
request's queries for /retrieve) and hands the batch to `handle`, which runs it (in a worker thread) and
settles each request's future. While a batch runs, new requests queue up and form the next batch, so under
load batches fill by themselves.

A request whose client went away while it waited (its future cancelled by `until_disconnect`) is dropped
before its batch starts (`dropped`). A batch that raises is run again one request at a time, so only the
request that breaks it fails (`fail`) and no client sees another's error; a request its batch already
answered (a server answering each request as it ends) is not run again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ragteam.config import check_number
from ragteam.serve.guard import MAX_WAIT_MS

T = TypeVar("T")


@dataclass(eq=False)
class Pending(Generic[T]):
    """One request waiting for its batch: what it asks (`item`) and the future its answer settles."""

    item: T
    future: asyncio.Future = field(repr=False)


class RequestBatcher(Generic[T]):
    """Gathers submitted items into batches for `handle` (override it; `size` and `fail` too where needed).

    Counters for /health: `batch_sizes` (batches by how many requests they held), `requests` (requests
    that reached a batch), `dropped` (requests whose client left before their batch started), `left`
    (requests whose client left while their batch ran), `running` (requests in the batch now running)."""

    def __init__(self, max_size: int, wait_ms: float) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        check_number("batch wait (ms)", wait_ms, 0, MAX_WAIT_MS)  # inf: every request would wait forever
        self.max_size = max_size
        self.wait_s = wait_ms / 1000.0
        self.queue: asyncio.Queue[Pending[T]] | None = None
        self.batch_sizes: Counter[int] = Counter()
        self.requests = 0
        self.dropped = 0
        self.left = 0
        self.running = 0

    @property
    def ready(self) -> bool:
        """Whether the batching loop runs, so a submitted request is taken into a batch."""
        return self.queue is not None

    @property
    def batches(self) -> int:
        return sum(self.batch_sizes.values())

    @property
    def max_batch_seen(self) -> int:
        return max(self.batch_sizes, default=0)

    def size(self, item: T) -> int:
        """How much of `max_size` one request takes (1: `max_size` counts requests)."""
        return 1

    async def handle(self, batch: list[Pending[T]]) -> None:
        """Run `batch` and settle each request's future (`settle`); raise if the batch as a whole fails."""
        raise NotImplementedError

    def fail(self, pending: Pending[T], error: Exception) -> None:
        """Answer a request whose batch of one raised: its future gets the exception (override to answer a
        value instead)."""
        settle(pending.future, error)

    async def submit(self, item: T) -> Any:
        """The answer to `item`, run in a batch with whatever else is waiting."""
        assert self.queue is not None, "the batching loop is not running"
        pending = Pending(item, asyncio.get_running_loop().create_future())
        await self.queue.put(pending)
        return await pending.future

    async def run(self) -> None:
        """The batching loop; runs until cancelled (the app's shutdown)."""
        self.queue = asyncio.Queue()
        while True:
            batch = await self._gather()
            live = [p for p in batch if not p.future.done()]  # clients that gave up while queued
            self.dropped += len(batch) - len(live)
            if not live:
                continue
            self.batch_sizes[len(live)] += 1
            self.requests += len(live)
            self.running = len(live)
            try:
                await self._handle_or_split(live)
            finally:
                self.running = 0
            self.left += sum(p.future.cancelled() for p in live)

    async def _gather(self) -> list[Pending[T]]:
        assert self.queue is not None
        loop = asyncio.get_running_loop()
        first = await self.queue.get()
        batch, filled = [first], self.size(first.item)
        deadline = loop.time() + self.wait_s
        while filled < self.max_size:
            try:
                item = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self.queue.get(), left)
                except TimeoutError:
                    break
            batch.append(item)
            filled += self.size(item.item)
        return batch

    async def _handle_or_split(self, batch: list[Pending[T]]) -> None:
        try:
            await self.handle(batch)
        except Exception as e:  # noqa: BLE001 - a failing batch fails its requests, never the server
            if len(batch) == 1:
                self.fail(batch[0], e)
                return
            for p in batch:  # someone's request broke it: run each alone, so only that one fails
                if p.future.done():  # answered before the failure, or its client left
                    continue
                try:
                    await self.handle([p])
                except Exception as own:  # noqa: BLE001 - this request's own failure, told to it alone
                    self.fail(p, own)


def settle(fut: asyncio.Future, outcome: Any) -> None:
    """Resolve `fut` with `outcome` (an exception is raised to its awaiter) unless it is already done."""
    if fut.done():
        return
    if isinstance(outcome, BaseException):
        fut.set_exception(outcome)
    else:
        fut.set_result(outcome)


def lifespan_of(batcher: RequestBatcher) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
    """A FastAPI lifespan that runs `batcher`'s loop while the app serves and cancels it at shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        task = asyncio.create_task(batcher.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return lifespan
