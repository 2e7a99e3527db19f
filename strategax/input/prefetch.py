"""Prefetch to device: a background thread runs the input pipeline (read, split, place) up to
N elements ahead of the training loop. Errors surface in the loop with their original
traceback; breaking out of the loop, exhausting the data or `close()` stops the thread (and
`next()` after `close()` raises StopIteration at once), and so does the end of the program (a
thread still placing a batch while the interpreter shuts down aborts the process inside XLA)."""
from __future__ import annotations

import atexit
import queue
import threading
from typing import Callable, Iterator

from .split import BatchError

_END = object()
_RUNNING: set[tuple[threading.Event, threading.Thread]] = set()  # producer threads still alive
_producer = threading.local()  # in a producer thread: `stop`, its Prefetcher's stop event


@atexit.register
def _stop_all(timeout: float = 2.0) -> None:
    """At exit, stop every producer and wait (briefly) for those in the middle of a batch."""
    running = list(_RUNNING)
    for stop, _ in running:
        stop.set()
    for _, thread in running:
        thread.join(timeout / max(len(running), 1))


def stopping() -> bool:
    """Whether the producer running on this thread has been told to stop (its iterator was
    dropped or closed): a wait inside the pipeline can give up."""
    stop = getattr(_producer, "stop", None)
    return stop is not None and stop.is_set()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def _raise(error: BaseException):
    if isinstance(error, BatchError):  # our own validation: name the consumer's (user's) line
        raise error.user_error() from None
    raise error  # the user's iterator failed: keep its traceback


def _put(q: queue.Queue, stop: threading.Event, item) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def _run(produce: Callable[[], Iterator], q: queue.Queue, stop: threading.Event) -> None:
    """The producer thread; it holds no reference to the Prefetcher, so dropping the iterator
    (e.g. `break` out of the loop) collects it and stops the thread."""
    me = (stop, threading.current_thread())
    _RUNNING.add(me)
    _producer.stop = stop
    items = None
    try:
        items = produce()
        for item in items:
            if not _put(q, stop, item):
                return
    except BaseException as e:  # noqa: BLE001 - handed to the consumer
        _put(q, stop, _Failure(e))
        return
    finally:  # a stopped generator runs its cleanup (closes the user's files) now, on this thread
        _RUNNING.discard(me)
        close = getattr(items, "close", None)
        if close is not None:
            close()
    _put(q, stop, _END)


class Prefetcher:
    """Iterates `produce()` in a daemon thread, keeping at most `buffer_size` elements ready."""

    def __init__(self, produce: Callable[[], Iterator], buffer_size: int = 1):
        self._queue: queue.Queue = queue.Queue(maxsize=buffer_size)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=_run, args=(produce, self._queue, self._stop), daemon=True,
                                        name="strategax-prefetch")
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self._done:
                raise StopIteration
            try:  # wake up now and then: `close()` from another thread ends a waiting next()
                item = self._queue.get(timeout=0.1)
                break
            except queue.Empty:
                continue
        if self._done:  # closed while the element was handed over: it is stale
            raise StopIteration
        if item is _END or isinstance(item, _Failure):
            self._done = True
            self.close()
            if item is _END:
                raise StopIteration
            _raise(item.error)
        return item

    def reserve(self, n: int) -> None:
        """Let the producer run up to `n` elements ahead (a compiled loop takes `n` at once:
        one element at a time, each hand-over between the threads would wait on the other)."""
        q = self._queue
        with q.not_full:
            if 0 < q.maxsize < n:
                q.maxsize = n
                q.not_full.notify_all()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the producer thread and drop what it made; later `next()` calls raise
        StopIteration. Waits up to `timeout` seconds for the thread to end (it ends at its next
        hand-over, or once the user's iterator yields, if it is busy inside it)."""
        self._done = True
        self._stop.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def __del__(self):
        self._stop.set()


class Synchronous:
    """The same interface without a thread (`experimental_fetch_to_device=False`)."""

    def __init__(self, produce: Callable[[], Iterator]):
        self._it = produce()
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        try:
            return next(self._it)
        except BatchError as e:
            _raise(e)

    def reserve(self, n: int) -> None:
        """Nothing to do: elements are made when taken."""

    def close(self, timeout: float = 0.0) -> None:
        self._done = True
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
