"""The ``Work`` handle c10d returns for a tpu_dist collective."""

import threading

import torch
import torch.distributed as dist


class Work(dist._Work):
    """A collective in flight. ``finish`` (run once, by the first ``wait``) completes it: waits for
    the transport and writes the results into the caller's tensors. ``result`` is what the future
    holds (the output tensors, as PyTorch's backends return them)."""

    def __init__(self, finish=None, result=()):
        super().__init__()
        self._finish = finish
        self._result = list(result)
        self._lock = threading.Lock()
        self._done = finish is None
        self._error = None

    def wait(self, timeout=None):
        with self._lock:
            if not self._done:
                try:
                    self._finish()
                except BaseException as e:  # kept: every later wait() raises it again
                    self._error = e
                self._done = True
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        return self._done

    def is_success(self):
        return self._done and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._result

    def get_future(self):
        # Completed when returned: DDP's gradient hooks then chain on it. The collective itself
        # was issued at the call; what waits here is only the copy of its results.
        future = torch.futures.Future()
        try:
            self.wait()
            future.set_result(self._result)
        except BaseException as e:
            future.set_exception(e)
        return future
