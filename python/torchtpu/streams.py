"""``torch.tpu.Stream`` and ``torch.tpu.Event``: one ordered stream per device.

PJRT orders a device's work by data dependencies (an op waits for the buffers it reads), so every
stream on a device is a handle to that single ordered stream: code written for several CUDA
streams (FSDP2's all-gather and reduce-scatter streams) runs correctly, without the overlap that
separate streams would give. ``wait_stream``/``wait_event`` have nothing to wait for; an event's
``synchronize`` waits for everything issued to its device before it was recorded.
"""

import contextlib
import time

import torch

from . import devices


class Stream(torch.Stream):
    """A ``torch.Stream`` (so ``tensor.record_stream(s)`` and ``isinstance(s, torch.Stream)`` work
    as with CUDA's) naming the device's one ordered stream."""

    def __new__(cls, device=None, priority=0, **kwargs):
        return super().__new__(cls, device=torch.device("tpu", devices.index_or_current(device)), priority=priority)

    # waiting, querying and synchronizing are torch.Stream's, through the device guard (aten/device.cpp)
    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def __repr__(self):
        return f"<torch.tpu.Stream device={self.device} (the device's ordered stream)>"


class Event(torch.Event):
    """A ``torch.Event`` on tpu: a point in the device's ordered stream. Waiting on it waits for
    everything issued to its device before it was recorded; a timed event takes its timestamp once
    that work is done."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        event = super().__new__(cls, "tpu", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)
        event._timed, event._time = enable_timing, None
        return event

    def record(self, stream=None):
        super().record(stream)  # a timed record waits for the work before it
        if self._timed:
            self._time = time.perf_counter()

    # torch.Event.elapsed_time accepts only exact torch.Event objects, not subclasses
    def elapsed_time(self, end) -> float:
        if self._time is None or getattr(end, "_time", None) is None:
            raise RuntimeError("elapsed_time needs two events recorded with enable_timing=True")
        return (end._time - self._time) * 1000.0


def current_stream(device=None) -> Stream:
    return Stream(device)


default_stream = current_stream


def set_stream(stream) -> None:
    """Every stream is the device's one stream: nothing to switch."""


@contextlib.contextmanager
def stream(s):
    yield s
