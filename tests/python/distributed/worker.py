"""Runs one test scenario on every rank, either as a torchrun worker (``worker.py SCENARIO``, one
process per rank, host-staged collectives) or as thread ranks in one process (``worker.py
--threads N SCENARIO``, compiled XLA collectives; needs TORCHTPU_NUM_CPU_DEVICES >= N).

Exits non-zero (the failure on stderr) when a check fails. Driven by tests/python/test_distributed.py.
"""

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import torchtpu  # noqa: E402
import collective_cases  # noqa: E402
import mpmd  # noqa: E402
import training  # noqa: E402

GLOO_LACKS = {"all_to_all", "all_reduce_premul_sum"}  # gloo has only all_to_all_single; no PREMUL_SUM
THREADS = "--threads" in sys.argv


def collectives(rank, world):
    # As processes, gloo on CPU tensors must agree too (the reference backend).
    gloo = None if THREADS else dist.new_group(backend="gloo")
    before = torchtpu.metrics.counters()["collectives"]
    for name in collective_cases.CASES:
        collective_cases.check(name, rank, world, "tpu", None)
        if gloo is not None and name not in GLOO_LACKS:
            collective_cases.check(name, rank, world, "cpu", gloo)
    assert torchtpu.metrics.counters()["collectives"] > before


def default_backend(rank, world):
    """init_process_group() without a backend: tpu_dist serves tpu tensors, and CPU ones too."""
    t = torch.ones(3, device="tpu") * (rank + 1)
    dist.all_reduce(t)
    c = torch.ones(2) * (rank + 1)
    dist.all_reduce(c)
    total = world * (world + 1) / 2
    assert t.cpu().tolist() == [total] * 3, t
    assert c.tolist() == [total] * 2, c
    assert dist.get_default_backend_for_device("tpu") == "tpu_dist"
    assert isinstance(dist.group.WORLD, torchtpu.distributed.ProcessGroupTPU), dist.group.WORLD


def data_shards(rank, world):
    """DeviceLoader over distributed_sampler: the ranks' batches cover the dataset once."""
    from torch.utils.data import DataLoader, TensorDataset
    from torchtpu.data import DeviceLoader, distributed_sampler
    data = TensorDataset(torch.arange(12))
    loader = DeviceLoader(DataLoader(data, batch_size=3, sampler=distributed_sampler(data, shuffle=False)))
    mine = torch.cat([ids for (ids,) in loader])
    assert mine.device.type == "tpu"
    every = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    assert sorted(torch.cat(every).cpu().tolist()) == list(range(12))


SCENARIOS = {"collectives": collectives, "data_shards": data_shards, "default_backend": default_backend, **training.SCENARIOS,
             **mpmd.SCENARIOS}
INIT = {"default_backend": {"backend": None},  # init_process_group arguments other than tpu_dist's
        "collectives": {"backend": "tpu_dist", "device_id": torch.device("tpu", 0)}}
TIMEOUT = {"peer_dies": 10, "peer_hangs": 3, "mismatch": 10}  # seconds


def main(argv):
    if THREADS:
        _, n, name, *args = argv
        torchtpu.distributed.run_threads(lambda rank, world: SCENARIOS[name](rank, world, *args), int(n),
                                         timeout=TIMEOUT.get(name, 300))
        return
    name, *args = argv
    torch.tpu.set_device(0)
    dist.init_process_group(**INIT.get(name, {"backend": "tpu_dist"}),
                            timeout=datetime.timedelta(seconds=TIMEOUT.get(name, 300)))
    try:
        SCENARIOS[name](dist.get_rank(), dist.get_world_size(), *args)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
