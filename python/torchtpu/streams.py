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

from . import _C
from .device_module import _device_index


class Stream:
    def __init__(self, device=None, priority=0, **kwargs):
        self.device = torch.device("tpu", _device_index(device))
        self.priority = priority

    def wait_stream(self, stream):
        """Nothing to wait for: the device has one ordered stream."""

    def wait_event(self, event):
        """Nothing to wait for: the device has one ordered stream."""

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def query(self) -> bool:
        self.synchronize()
        return True

    def synchronize(self):
        _C._synchronize(self.device.index, "stream synchronize")

    def __eq__(self, other):
        return isinstance(other, Stream) and other.device == self.device

    def __hash__(self):
        return hash(self.device)

    def __repr__(self):
        return f"<torch.tpu.Stream device={self.device} (the device's ordered stream)>"


class Event:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self.device = None
        self._time = None

    def record(self, stream=None):
        stream = stream or current_stream()
        self.device = stream.device
        if self.enable_timing:  # a timestamp needs the work before it done: wait for it
            stream.synchronize()
            self._time = time.perf_counter()

    def wait(self, stream=None):
        """Nothing to wait for: the device has one ordered stream."""

    def query(self) -> bool:
        self.synchronize()
        return True

    def synchronize(self):
        if self.device is not None:
            _C._synchronize(self.device.index, "event synchronize")

    def elapsed_time(self, end) -> float:
        if self._time is None or end._time is None:
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
