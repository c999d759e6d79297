"""Input pipelines for tpu: ``DeviceLoader`` moves batches to the device ahead of the step.

    loader = torchtpu.data.DeviceLoader(DataLoader(dataset, batch_size=32), prefetch=2)
    for x, y in loader:          # x, y already on tpu
        ...

A background thread takes batches from the wrapped loader and copies them to the device (tensors
anywhere inside tuples, lists and dicts), keeping up to ``prefetch`` batches ready, so loading and
host-to-device copies overlap the training step instead of preceding it. Under torchrun, give the
wrapped loader ``distributed_sampler(dataset)`` so each rank reads its own shard.
"""

import queue
import threading

import torch

_DONE = object()


def to_device(batch, device):
    """``batch`` with every tensor in it (through tuples, lists, dicts) moved to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return type(batch)((k, to_device(v, device)) for k, v in batch.items())
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(to_device(v, device) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


class _Failure:
    def __init__(self, error):
        self.error = error


class DeviceLoader:
    def __init__(self, loader, device="tpu", prefetch=2):
        if prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, got {prefetch}")
        self.loader, self.device, self.prefetch = loader, torch.device(device), prefetch

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        ready = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        device_index = self.device.index if self.device.index is not None else torch.tpu.current_device()

        def put(item):
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def fill():
            torch.tpu.set_device(device_index)  # the consumer's device, on this thread too
            try:
                for batch in self.loader:
                    if not put(to_device(batch, self.device)):
                        return
                put(_DONE)
            except BaseException as e:  # raised again in the consumer, at the batch it broke
                put(_Failure(e))

        worker = threading.Thread(target=fill, name="torchtpu DeviceLoader", daemon=True)
        worker.start()
        try:
            while True:
                item = ready.get()
                if item is _DONE:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:  # also when the consumer stops early: the worker must not block forever
            stop.set()
            worker.join()


def distributed_sampler(dataset, shuffle=True, seed=0, drop_last=False):
    """The sampler that gives this rank its shard under torch.distributed (every sample once per
    epoch across ranks); the plain sampler when no process group is initialized. Call its
    ``set_epoch(epoch)`` each epoch when shuffling, as with any DistributedSampler."""
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler
    if dist.is_available() and dist.is_initialized():
        return DistributedSampler(dataset, shuffle=shuffle, seed=seed, drop_last=drop_last)
    if shuffle:
        return RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))
    return SequentialSampler(dataset)
