"""torchtpu.data.DeviceLoader: the wrapped loader's batches, in order, already on the device,
loaded ahead of the consumer; errors and early exits behave."""

import threading
from collections import namedtuple

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import torchtpu
from torchtpu.data import DeviceLoader, distributed_sampler

Pair = namedtuple("Pair", "x y")


def test_batches_arrive_in_order_on_the_device_with_their_structure():
    xs, ys = torch.randn(20, 3), torch.arange(20)
    loader = DataLoader(TensorDataset(xs, ys), batch_size=4)
    got = list(DeviceLoader(loader, prefetch=3))
    assert len(got) == len(loader) == 5
    for (x, y), (cx, cy) in zip(got, loader):
        assert x.device.type == "tpu" and y.device.type == "tpu"
        torch.testing.assert_close(x.cpu(), cx)
        assert torch.equal(y.cpu(), cy)

    nested = [{"a": torch.ones(2), "meta": "kept"}, Pair(torch.zeros(1), [torch.arange(3), 7])]
    (out_dict, out_pair), = list(DeviceLoader([nested]))
    assert out_dict["a"].device.type == "tpu" and out_dict["meta"] == "kept"
    assert isinstance(out_pair, Pair) and out_pair.y[0].device.type == "tpu" and out_pair.y[1] == 7


class Recorded(Dataset):
    """Notes which items were read, so a test can see the loader running ahead."""

    def __init__(self, n):
        self.n, self.read = n, [threading.Event() for _ in range(n)]

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.read[i].set()
        return torch.full((2,), float(i))


def test_the_next_batches_load_while_the_consumer_holds_one():
    data = Recorded(6)
    it = iter(DeviceLoader(DataLoader(data, batch_size=1), prefetch=2))
    first = next(it)
    assert first.cpu().tolist() == [[0.0, 0.0]]
    # While the consumer works on batch 0, the worker fetches ahead (bounded by prefetch).
    assert data.read[1].wait(timeout=30) and data.read[2].wait(timeout=30)
    assert [b.cpu()[0, 0].item() for b in it] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_loading_error_reaches_the_consumer_at_that_batch():
    class Broken(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            if i == 2:
                raise ValueError("bad sample 2")
            return torch.tensor([i])

    it = iter(DeviceLoader(DataLoader(Broken(), batch_size=1)))
    assert next(it).item() == 0 and next(it).item() == 1
    with pytest.raises(ValueError, match="bad sample 2"):
        next(it)


def test_stopping_early_ends_the_worker():
    before = threading.active_count()
    for i, _ in enumerate(DeviceLoader(DataLoader(TensorDataset(torch.randn(100, 2)), batch_size=1))):
        if i == 3:
            break
    assert threading.active_count() == before


def test_sampler_without_a_process_group_covers_the_dataset_once():
    data = TensorDataset(torch.arange(10))
    assert sorted(distributed_sampler(data)) == list(range(10))
    assert list(distributed_sampler(data, shuffle=False)) == list(range(10))


def test_prefetch_must_be_positive():
    with pytest.raises(ValueError, match="prefetch"):
        DeviceLoader([], prefetch=0)
