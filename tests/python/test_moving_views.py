"""Views that move between calls: an op issued at one line on row i of a tensor, for many i, runs
one program with the row's offset as a run-time value once a second offset was seen (exec/
runtime_offset.h), and reading a part of a small storage on the host compiles nothing (the storage
is downloaded whole). Every result is compared with CPU PyTorch."""

import pytest
import torch

import torchtpu


def _compiles():
    return torchtpu.metrics.counters()["compiles"]


def _rows_loop(x):
    for i in range(x.shape[0]):
        x[i].mul_(i + 2)             # in place on a row that moves
        x[:, i] = x[i, :6] + x[-1 - i, 1:7]  # a strided column written, rows read
    return x


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy", "debug"])
def test_a_loop_over_rows_matches_cpu_and_compiles_two_programs_per_op(mode, no_fallbacks):
    x = torch.randn(6, 10)
    with torchtpu.eager_mode(mode):
        got = _rows_loop(x.to("tpu"))
        torchtpu.sync()
        assert torch.equal(got.cpu(), _rows_loop(x.clone()))
        # the same loop on another tensor of the same shape: every offset is a run-time one now
        before = _compiles()
        again = _rows_loop(torch.randn(6, 10).to("tpu"))
        torchtpu.sync()
        again.cpu()
        if mode in ("strict", "debug"):
            assert _compiles() == before


def test_a_row_that_moves_compiles_its_op_twice_whatever_the_number_of_rows(no_fallbacks):
    x = torch.randn(32, 7).to("tpu")
    before = _compiles()
    rows = [(x[i] * 3).sum().item() for i in range(32)]
    assert _compiles() - before <= 4  # mul and sum, each at the first offset and at a run-time one
    assert rows == pytest.approx([(r * 3).sum().item() for r in x.cpu()], rel=1e-5, abs=1e-6)


def test_reading_part_of_a_small_storage_compiles_nothing():
    host = torch.arange(64, dtype=torch.int32).reshape(16, 4)
    x = host.to("tpu")
    before = _compiles()
    for n in range(1, 9):
        assert x[:n].tolist() == host[:n].tolist()
        assert x[n, 1:].tolist() == host[n, 1:].tolist()
        assert x[:, n % 4].cpu().equal(host[:, n % 4])  # strided
        assert x[n, 2].item() == host[n, 2].item()
    assert _compiles() == before


def test_reading_a_small_part_of_a_large_storage_copies_it_on_the_device():
    """Past 1 MiB, and where the part is under half of the storage, the part is copied into a
    buffer of its own first (one program) rather than moving the whole storage."""
    host = torch.randn(1024, 512)
    x = host.to("tpu")
    assert torch.equal(x[3:5, 7:9].cpu(), host[3:5, 7:9])
    assert x[1000, 511].item() == host[1000, 511].item()
    assert torch.equal(x[:600].cpu(), host[:600])  # over half: downloaded whole
    conj = torch.randn(8, 3, dtype=torch.complex64)
    assert torch.equal(conj.to("tpu")[2:4].conj().cpu(), conj[2:4].conj())
