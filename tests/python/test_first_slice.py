"""The first PyTorch slice: tpu tensors are real XLA computations behind PyTorch's device API."""

import time

import pytest
import torch

import torchtpu


def test_device_is_named_tpu():
    x = torch.ones(2, 3, device="tpu")
    assert x.device.type == "tpu"
    assert x.is_tpu
    assert torch.tpu.is_available()
    assert torch.tpu.device_count() >= 1


def test_ones_plus_one_matches_cpu():
    got = (torch.ones(2, 3, device="tpu") + 1).cpu()
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, torch.ones(2, 3) + 1)


def test_add_runs_an_xla_executable_not_a_cpu_kernel():
    torchtpu.cache.wait_for_background_compiles()  # an earlier test's window must not land in the count
    torchtpu.reset_counters()
    a = torch.ones(4, 5, device="tpu")
    (a + a).cpu()
    c = torchtpu.counters()
    assert c["executions"] >= 2  # fill, add
    cache = torchtpu.cache.stats()
    assert sum(cache["hits"].values()) + cache["misses"] == c["executions"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool])
def test_round_trip_and_add(dtype):
    cpu = (torch.arange(12).reshape(3, 4) % 5).to(dtype)
    tpu = cpu.to("tpu")
    assert tpu.dtype == dtype
    torch.testing.assert_close(tpu.cpu(), cpu)
    if dtype != torch.bool:
        torch.testing.assert_close((tpu + tpu).cpu(), cpu + cpu)


def test_type_promotion_and_broadcasting_follow_pytorch():
    a = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    b = torch.tensor([0.5, 1.5, 2.5])
    got = (a.to("tpu") + b.to("tpu")).cpu()
    want = a + b
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    torch.testing.assert_close((a.to("tpu") + 2.5).cpu(), a + 2.5)
    torch.testing.assert_close(torch.add(a.to("tpu"), a.to("tpu"), alpha=3).cpu(), a + 3 * a)


def test_views_are_read_by_the_consuming_op():
    base = torch.arange(12.0).reshape(3, 4)
    t = base.to("tpu")
    torch.testing.assert_close((t.t() + 0).cpu(), base.t() + 0)
    torch.testing.assert_close((t[1] + 1).cpu(), base[1] + 1)
    torch.testing.assert_close((t[:, ::2] + 1).cpu(), base[:, ::2] + 1)
    torch.testing.assert_close(t.t().cpu(), base.t())


def test_in_place_fill_through_a_view_is_seen_by_every_alias():
    t = torch.zeros(3, 4, device="tpu")
    alias = t.view(12)
    t[1].fill_(7)
    want = torch.zeros(3, 4)
    want[1] = 7
    torch.testing.assert_close(t.cpu(), want)
    torch.testing.assert_close(alias.cpu(), want.view(12))


def test_copy_into_a_tpu_view():
    t = torch.zeros(2, 3, device="tpu")
    t[:, 1].copy_(torch.tensor([5.0, 6.0]))
    torch.testing.assert_close(t.cpu(), torch.tensor([[0.0, 5.0, 0.0], [0.0, 6.0, 0.0]]))


def test_item_reads_one_value():
    t = torch.full((3,), 2.5, device="tpu")
    assert (t + 1)[2].item() == 3.5


def test_shape_mismatch_raises_like_cpu():
    with pytest.raises(RuntimeError) as cpu_error:
        torch.ones(2, 3) + torch.ones(4)
    with pytest.raises(type(cpu_error.value)) as tpu_error:
        torch.ones(2, 3, device="tpu") + torch.ones(4, device="tpu")
    message = str(tpu_error.value)
    assert "4" in message and "3" in message  # names the sizes that do not broadcast


def test_platform_reports_what_is_underneath():
    info = torchtpu.platform_info()
    assert torchtpu.platform() in ("cpu", "cuda", "tpu")
    assert info["xla_version"]
    assert "stablehlo_current_version" in info
    assert torch.tpu.get_device_name()


def test_synchronize_waits_for_queued_work():
    x = torch.ones(64, 64, device="tpu")
    for _ in range(10):
        x = x + x
    torch.tpu.synchronize()
    assert x[0, 0].item() == 1024.0


def test_a_program_compiled_ahead_counts_one_request():
    """Strict mode compiles a waiting op's program ahead of its run; whether that finished before
    the op asked for it or not, the op's request counts one hit or miss (no memory hit besides)."""
    with torchtpu.eager_mode("strict"):
        torchtpu.cache.wait_for_background_compiles()
        torchtpu.reset_counters()
        a = torch.ones(9, 11, device="tpu")  # shapes no other test uses: both ops wait
        b = a * 3
        time.sleep(0.5)  # the compiles ahead finish before the read runs the ops
        torch.testing.assert_close(b.cpu(), torch.full((9, 11), 3.0))
        stats = torchtpu.cache.stats()
        assert sum(stats["hits"].values()) + stats["misses"] == torchtpu.counters()["executions"] == 2
