"""Distributed training on tpu: the ``tpu_dist`` c10d backend.

``import torchtpu`` registers it, so ``dist.init_process_group("tpu_dist")`` (or no backend at
all, for tpu tensors) works under ``torchrun``, and DDP, FSDP2, DTensor and tensor parallelism run
on it unchanged. ``run_threads`` runs ranks as threads of this process instead, one device each,
where every collective is a compiled XLA collective. See docs/distributed.md.
"""

import contextlib
import datetime
import threading

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d_module

from .. import patches
from . import functional
from .host_transport import HostTransport
from .process_group import ProcessGroupTPU
from .thread_transport import Rendezvous, ThreadTransport

__all__ = ["ProcessGroupTPU", "register", "run_threads"]

_thread_rank = threading.local()


def _create(opts, backend_options=None):
    """c10d's creator for ``tpu_dist`` (its extended API, which names the group)."""
    # A process group means the devices will be used: start the runtime now. DeviceMesh then sees
    # torch.tpu.is_initialized() and keeps the current device instead of choosing
    # set_device(LOCAL_RANK), which is CUDA's layout (every GPU visible to every process), not
    # PJRT's (each process sees its own devices, numbered from 0).
    torch.tpu.device_count()
    if getattr(_thread_rank, "active", False):
        # Group names are unique per process, so the threads' copies of one group differ in name;
        # they agree on its ranks and on how many groups of those ranks came before it.
        ranks = tuple(opts.global_ranks_in_group)
        _thread_rank.groups[ranks] = _thread_rank.groups.get(ranks, 0) + 1
        transport = ThreadTransport((ranks, _thread_rank.groups[ranks]), opts.group_rank, opts.group_size)
    else:
        transport = HostTransport(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    return ProcessGroupTPU(transport, opts.group_rank, opts.group_size, opts.timeout)


def register():
    if "TPU_DIST" not in dist.Backend._plugins:
        dist.Backend.register_backend("tpu_dist", _create, extended_api=True, devices=["tpu"])
    functional.register()


class _ThreadWorld(c10d_module._World):
    """One thread's c10d state: the stock _World keeps groups in module globals, shared by all."""

    _FIELDS = ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "tags_to_pg", "pg_to_tag")

    def __init__(self):
        super().__init__()
        self._state = {name: {} for name in self._FIELDS}
        self._state["group_count"] = 0


for _field in (*_ThreadWorld._FIELDS, "group_count"):
    setattr(_ThreadWorld, _field, property(lambda self, f=_field: self._state[f],
                                           lambda self, value, f=_field: self._state.__setitem__(f, value)))


class ThreadLocalWorld:
    """c10d's ``_world`` with one ``_ThreadWorld`` per rank thread. Other threads (autograd's
    device threads, which run DDP's communication hooks) see the world of the rank whose device
    they serve: rank r's device is tpu:r."""

    def __init__(self):
        object.__setattr__(self, "_local", threading.local())
        object.__setattr__(self, "_by_device", {})

    def _world(self):
        if not hasattr(self._local, "world"):
            device = torch.tpu.current_device()
            if getattr(_thread_rank, "active", False):
                self._by_device[device] = _ThreadWorld()
            self._local.world = self._by_device.get(device) or _ThreadWorld()
        return self._local.world

    def __getattr__(self, name):
        return getattr(self._world(), name)

    def __setattr__(self, name, value):
        setattr(self._world(), name, value)


class FakeTensorCacheByDevice:
    """FakeTensorMode's dispatch cache (one for the process) kept per current device. Its key holds
    an index-less device argument as given ("tpu": DTensor's sharding propagation makes its fake
    arguments so) while the cached output has it resolved to the current device, so one cache would
    serve rank 1 the tpu:0 tensors rank 0 made and the next op would find two devices."""

    def __init__(self):
        self._by_device = {}

    def _cache(self):
        return self._by_device.setdefault(torch.tpu.current_device(), {})

    def get(self, key, default=None):
        return self._cache().get(key, default)

    def __setitem__(self, key, entry):
        self._cache()[key] = entry

    # Eviction (the object a key names died, on whichever thread) and clearing reach every device's.
    def __contains__(self, key):
        return any(key in cache for cache in list(self._by_device.values()))

    def pop(self, key, default=None):
        for cache in list(self._by_device.values()):
            cache.pop(key, None)
        return default

    def __len__(self):
        return sum(len(cache) for cache in list(self._by_device.values()))

    def clear(self):
        self._by_device.clear()


def per_thread_world(original):
    """c10d's world while ranks run as threads (patches.py)."""
    return ThreadLocalWorld()


def fake_tensor_cache_per_device(original):
    """FakeTensorMode's dispatch cache while ranks run as threads (patches.py)."""
    return FakeTensorCacheByDevice()


@contextlib.contextmanager
def _thread_local_world():
    """Lets each thread be its own rank: c10d's world and group registry become per thread, fake
    tensors' dispatch cache per device (both patches.py), and autograd runs backward on the
    calling thread (as the ranks' collectives expect)."""
    with patches.installed("run_threads"):
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
        try:
            with torch.autograd.set_multithreading_enabled(False):
                yield
        finally:
            torch._C._distributed_c10d._set_thread_isolation_mode(False)


def run_threads(fn, world_size: int, *args, timeout: float = 300.0):
    """Runs ``fn(rank, world_size, *args)`` on ``world_size`` threads, each an initialized rank of a
    ``tpu_dist`` process group whose device is ``tpu:rank``; returns the ranks' results in order.
    Needs that many devices (on the CPU plugin: ``TORCHTPU_NUM_CPU_DEVICES``). If a rank raises, the
    others' pending collectives fail promptly and the first error is re-raised here."""
    if torch.tpu.device_count() < world_size:
        raise RuntimeError(f"run_threads needs {world_size} tpu devices, this process has "
                           f"{torch.tpu.device_count()} (set TORCHTPU_NUM_CPU_DEVICES={world_size} before "
                           f"importing torchtpu on the XLA CPU plugin)")
    store = dist.HashStore()
    results, errors = [None] * world_size, [None] * world_size

    def rank_main(rank):
        _thread_rank.active = True
        _thread_rank.groups = {}
        torch.tpu.set_device(rank)
        try:
            dist.init_process_group("tpu_dist", rank=rank, world_size=world_size, store=store,
                                    timeout=datetime.timedelta(seconds=timeout))
            try:
                results[rank] = fn(rank, world_size, *args)
            finally:
                dist.destroy_process_group()
        except BaseException as e:
            errors[rank] = e
            Rendezvous.rank_failed(rank, f"{type(e).__name__}: {e}")

    with _thread_local_world():
        threads = [threading.Thread(target=rank_main, args=(r,), name=f"tpu rank {r}") for r in range(world_size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    Rendezvous.reset()
    first = next((e for e in errors if e is not None and not isinstance(e, dist.DistBackendError)), None)
    first = first or next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return results
