"""An input-bound training loop on tpu with and without torchtpu.data.DeviceLoader.

    python benchmarks/data_loading.py [--repeats 5] [--batches 40]

First, what one host-to-device copy of 64 MiB costs the caller: when ``.to("tpu")`` returns and
when the copy is done, from pageable and from pinned memory, with and without non_blocking.

Each batch costs the host some work to produce (a synthetic decode + augment of 32 images,
3x64x64), and the step is a small convolutional network's forward, backward and SGD step. Without
DeviceLoader the loop loads, copies, then steps; with it, a background thread loads and copies the
next batches while the step runs. Reported: median seconds per epoch and the ratio.
"""

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset

import torchtpu
from torchtpu.data import DeviceLoader


class SyntheticImages(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        raw = torch.randint(0, 256, (3, 80, 80), generator=g, dtype=torch.uint8)
        img = raw.float().div(255)[:, 8:72, 8:72]  # crop
        img = (img - img.mean((1, 2), keepdim=True)) / (img.std((1, 2), keepdim=True) + 1e-5)
        img = torch.nn.functional.avg_pool2d(img[None], 3, 1, 1)[0]  # a blur, as augmentations cost
        return img, i % 10


def model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)).to("tpu")


def epoch(net, opt, batches):
    for x, y in batches:
        x, y = x.to("tpu", non_blocking=True), y.to("tpu", non_blocking=True)  # no-ops when already there
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    torch.tpu.synchronize()


def copy_latency(repeats, mib=64):
    """Median ms until ``.to("tpu")`` returns and until the copy is done, per source and flag."""
    pageable = torch.randn(mib << 18)
    pinned = pageable.pin_memory()
    print("| source | non_blocking | call returns ms | copy done ms |\n| --- | --- | ---: | ---: |")
    for name, source in (("pageable", pageable), ("pinned", pinned)):
        for non_blocking in (False, True):
            returned, done = [], []
            for _ in range(repeats):
                start = time.perf_counter()
                copy = source.to("tpu", non_blocking=non_blocking)
                returned.append(time.perf_counter() - start)
                torch.tpu.synchronize()
                done.append(time.perf_counter() - start)
                del copy
            print(f"| {name} | {non_blocking} | {1e3 * statistics.median(returned):.2f} | "
                  f"{1e3 * statistics.median(done):.2f} |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batches", type=int, default=40)
    args = p.parse_args()
    copy_latency(args.repeats)
    loader = DataLoader(SyntheticImages(32 * args.batches), batch_size=32)
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    epoch(net, opt, loader)  # compiles
    times = {"plain loop": [], "DeviceLoader": []}
    for _ in range(args.repeats):  # interleaved, so machine noise hits both
        for name, batches in (("plain loop", loader), ("DeviceLoader", DeviceLoader(loader, prefetch=2))):
            start = time.perf_counter()
            epoch(net, opt, batches)
            times[name].append(time.perf_counter() - start)
    plain, overlapped = (statistics.median(times[k]) for k in times)
    print(f"| {args.batches} batches of 32 | plain loop {plain:.3f} s | DeviceLoader {overlapped:.3f} s "
          f"| {plain / overlapped:.2f}x |")


if __name__ == "__main__":
    main()
