"""The ``Work`` handle c10d returns for a tpu_dist collective."""

import threading

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import _disable_current_modes


def hidden_from_modes():
    """The tensor ops a collective makes internally (staging copies to and from the host) are the
    collective's, as they would be inside NCCL: Python dispatch modes do not see them. Selective
    activation checkpointing counts the ops it sees, and a finish step run at wait() would
    otherwise count differently in the forward and in the recomputation."""
    return _disable_current_modes()


class Work(dist._Work):
    """A collective in flight, completed in one of two ways: ``future`` (a torch Future that
    completes with the outputs once they are in place) or ``finish`` (run once, by the first
    ``wait``: waits for the transport and writes the results into the caller's tensors); neither
    means it is done already. ``result`` is what the future holds (the output tensors, as
    PyTorch's backends return them)."""

    def __init__(self, finish=None, result=(), future=None, where=None):
        super().__init__()
        self._finish = finish
        self._future = future
        self._where = where
        self._result = list(result)
        self._lock = threading.Lock()
        self._done = finish is None
        self._error = None

    def wait(self, timeout=None):
        if self._future is not None:
            try:
                self._future.wait()
            except dist.DistBackendError:
                raise
            except RuntimeError as e:  # the future's error crossed gloo's thread as a RuntimeError
                raise self._where.error(str(e)) from e
            return True
        with self._lock:
            if not self._done:
                try:
                    with hidden_from_modes():
                        self._finish()
                except BaseException as e:  # kept: every later wait() raises it again
                    self._error = e
                self._done = True
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._future.done() if self._future is not None else self._done

    def is_success(self):
        return self._done and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._result

    def get_future(self):
        if self._future is not None:
            return self._future
        # Completed when returned (DDP's gradient hooks chain on it): the collective was issued at
        # the call; what waits here is only the copy of its results.
        future = torch.futures.Future()
        try:
            self.wait()
            future.set_result(self._result)
        except BaseException as e:
            future.set_exception(e)
        return future
