"""Adam, AdamW, SGD and Adagrad with ``fused=True`` on tpu run ``aten::_fused_{adam,adamw,sgd,adagrad}_`` on the
device (python/torchtpu/fused_optimizers.py) and match the same optimizers' fused CPU kernels.

Every case runs a few steps on CPU and on tpu from the same parameters and gradients and compares
parameters, gradients and every optimizer state. The tpu steps must cause no CPU fallback, no host
sync and no device-to-host copy.

Tolerances: float32 uses rtol 1e-5 / atol 1e-6 (the device and the CPU kernel round the same
float32 formulas in a different order, a few ulps). bfloat16 uses rtol 2**-7 / atol 1e-6: both sides
compute in float32 and round once at the store, so a result may land one bfloat16 ulp (at most
2**-7 of its magnitude) away where the float32 values straddle a rounding boundary.
"""

import pytest
import torch

import torchtpu

SHAPES = [(7, 5), (33,), (3,)]
# PyTorch 2.11's fused CPU SGD never writes bfloat16 parameters in its vectorized loop (only the
# scalar tail, for the last numel % 16 or 32 elements, updates them), so bfloat16 SGD is compared
# on tensors small enough to run entirely in the scalar tail, whose math is the CUDA kernel's.
SMALL_SHAPES = [(3, 5), (7,), (1,)]

FP32_TOL = dict(rtol=1e-5, atol=1e-6)
BF16_TOL = dict(rtol=2**-7, atol=1e-6)


def _params(device, dtype, shapes):
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s).to(dtype).to(device)) for s in shapes]


def _grads(step, params, device):
    torch.manual_seed(100 + step)
    return [torch.randn(p.shape).to(p.dtype).to(device) for p in params]


def _device_quiet():
    """What must not change while tpu steps run: fallbacks, host syncs, bytes read back."""
    m = torchtpu.metrics.as_dict()
    return m["cpu_fallbacks"], m["host_syncs"], m["bytes_to_host"]


def _run(make_opt, device, dtype, shapes, steps):
    params = _params(device, dtype, shapes)
    opt = make_opt(params)
    before = _device_quiet()
    for step in range(steps):
        for p, g in zip(params, _grads(step, params, device)):
            p.grad = g
        opt.step()
    if device == "tpu":
        assert _device_quiet() == before, "a fused tpu step fell back to the CPU or synced"
    return params, opt


def _assert_same(cpu, tpu, tol):
    (cpu_params, cpu_opt), (tpu_params, tpu_opt) = cpu, tpu
    for pc, pt in zip(cpu_params, tpu_params):
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), **tol)
        torch.testing.assert_close(pt.grad.cpu(), pc.grad, **tol)
        state_c, state_t = cpu_opt.state[pc], tpu_opt.state[pt]
        assert state_c.keys() == state_t.keys()
        for key, value in state_c.items():
            assert state_t[key].device.type == "tpu", key
            torch.testing.assert_close(state_t[key].cpu(), value, **tol, msg=key)


def _compare(make_opt, dtype=torch.float32, shapes=SHAPES, steps=3):
    tol = FP32_TOL if dtype == torch.float32 else BF16_TOL
    cpu = _run(make_opt, "cpu", dtype, shapes, steps)
    tpu = _run(make_opt, "tpu", dtype, shapes, steps)
    _assert_same(cpu, tpu, tol)


def _lr(kind, value):
    # A tensor lr must be a fresh CPU tensor per optimizer (torch.optim keeps it as given).
    return torch.tensor(value) if kind == "tensor" else value


@pytest.mark.parametrize("lr_kind", ["float", "tensor"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_adam_matches_cpu_fused(cls, amsgrad, maximize, weight_decay, lr_kind):
    _compare(lambda ps: cls(ps, lr=_lr(lr_kind, 1e-3), weight_decay=weight_decay, amsgrad=amsgrad,
                            maximize=maximize, fused=True))


SGD_MOMENTUM = [  # (momentum, dampening, nesterov)
    (0.0, 0.0, False), (0.9, 0.0, False), (0.9, 0.0, True), (0.9, 0.5, False)]


@pytest.mark.parametrize("lr_kind", ["float", "tensor"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("momentum,dampening,nesterov", SGD_MOMENTUM)
def test_sgd_matches_cpu_fused(momentum, dampening, nesterov, maximize, weight_decay, lr_kind):
    _compare(lambda ps: torch.optim.SGD(
        ps, lr=_lr(lr_kind, 0.05), momentum=momentum, dampening=dampening, nesterov=nesterov,
        weight_decay=weight_decay, maximize=maximize, fused=True))


@pytest.mark.parametrize("lr_kind", ["float", "tensor"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("lr_decay", [0.0, 0.01])
def test_adagrad_matches_cpu_fused(lr_decay, maximize, weight_decay, lr_kind):
    _compare(lambda ps: torch.optim.Adagrad(ps, lr=_lr(lr_kind, 0.05), lr_decay=lr_decay,
                                            weight_decay=weight_decay, maximize=maximize, fused=True))


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
def test_adam_bfloat16_matches_cpu_fused(cls, amsgrad):
    # lr 1e-2: a bfloat16 parameter near 1 has an ulp of 2**-7, so smaller steps would not move it.
    _compare(lambda ps: cls(ps, lr=1e-2, weight_decay=0.1, amsgrad=amsgrad, fused=True),
             dtype=torch.bfloat16)


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_bfloat16_matches_cpu_fused(nesterov):
    _compare(lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=nesterov,
                                        weight_decay=0.1, fused=True),
             dtype=torch.bfloat16, shapes=SMALL_SHAPES)


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, amsgrad=True, fused=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1, fused=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.1, fused=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.05, weight_decay=0.1, fused=True),
}


def _run_scaled(make_opt, device, inf_at_step):
    """Three GradScaler steps; the gradients of step ``inf_at_step`` hold an inf."""
    params = _params(device, torch.float32, SHAPES)
    opt = make_opt(params)
    scaler = torch.amp.GradScaler(device, init_scale=1024.0)
    before = _device_quiet()
    for step in range(3):
        opt.zero_grad()
        xs = [g.requires_grad_(False) for g in _grads(step, params, device)]
        loss = sum((p * x).sum() for p, x in zip(params, xs))
        scaler.scale(loss).backward()
        if step == inf_at_step:
            with torch.no_grad():
                params[1].grad[3] = float("inf")
        scaler.step(opt)
        scaler.update()
    if device == "tpu" and getattr(opt, "_step_supports_amp_scaling", False):
        assert _device_quiet() == before, "a GradScaler step on tpu fell back or synced"
    elif device == "tpu":  # GradScaler reads found_inf itself (PyTorch's Adagrad, also on CUDA)
        assert _device_quiet()[0] == before[0], "a GradScaler step on tpu fell back"
    return params, opt, scaler


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_grad_scaler_skips_a_step_with_inf_as_on_cpu(name):
    cpu_params, cpu_opt, cpu_scaler = _run_scaled(OPTIMIZERS[name], "cpu", inf_at_step=1)
    tpu_params, tpu_opt, tpu_scaler = _run_scaled(OPTIMIZERS[name], "tpu", inf_at_step=1)
    _assert_same((cpu_params, cpu_opt), (tpu_params, tpu_opt), FP32_TOL)
    assert tpu_scaler.get_scale() == cpu_scaler.get_scale() == 512.0  # backed off once
    if name != "sgd":  # the skipped step is not counted
        assert tpu_opt.state[tpu_params[0]]["step"].item() == 2.0


@pytest.mark.parametrize("lr_kind", ["float", "tensor"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_skipped_step_leaves_everything_bit_identical(name, lr_kind):
    """found_inf == 1 is masking on the device: parameters, states and the (still scaled) gradients
    come back exactly as they were, inf and nan included; only the step count moves (torch.optim
    adds 1 before the kernel and takes found_inf off after it)."""
    params = _params("tpu", torch.float32, SHAPES)
    opt = OPTIMIZERS[name](params)
    if lr_kind == "tensor":
        opt.param_groups[0]["lr"] = torch.tensor(opt.param_groups[0]["lr"])
    for p, g in zip(params, _grads(0, params, "tpu")):
        p.grad = g
    opt.step()  # creates the states
    for p, g in zip(params, _grads(1, params, "tpu")):
        p.grad = g
    params[0].grad[0, 0] = float("nan")
    params[1].grad[0] = float("inf")
    snapshot = [(p.detach().cpu(), p.grad.cpu(), {k: v.cpu() for k, v in opt.state[p].items()})
                for p in params]
    opt.grad_scale = torch.tensor(8.0, device="tpu")
    opt.found_inf = torch.tensor(1.0, device="tpu")
    opt.step()
    for p, (value, grad, state) in zip(params, snapshot):
        assert torch.equal(p.detach().cpu(), value)
        torch.testing.assert_close(p.grad.cpu(), grad, rtol=0, atol=0, equal_nan=True)
        for key, v in state.items():
            assert torch.equal(opt.state[p][key].cpu(), v), key


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fused_eager_mode_step_matches_cpu(name):
    cpu = _run(OPTIMIZERS[name], "cpu", torch.float32, SHAPES, steps=1)
    with torchtpu.eager_mode("fused"):
        tpu = _run(OPTIMIZERS[name], "tpu", torch.float32, SHAPES, steps=1)
    _assert_same(cpu, tpu, FP32_TOL)


ADAM_KWARGS = dict(beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8, amsgrad=True, maximize=False)


def _adam_args(device):
    torch.manual_seed(3)
    lists = [[torch.randn(s).abs().to(device) for s in SHAPES] for _ in range(5)]
    steps = [torch.tensor(4.0, device=device) for _ in SHAPES]
    return lists + [steps]


@pytest.mark.parametrize("overload", ["default", "tensor_lr"])
@pytest.mark.parametrize("op", ["_fused_adam", "_fused_adamw"])
def test_functional_variants_match_cpu(op, overload):
    """The out-of-place variants functionalization uses (PyTorch's composite kernels clone and call
    the in-place op, which is ours on tpu) return what CPU returns and leave the inputs alone."""
    packet = getattr(getattr(torch.ops.aten, op), overload)
    lr = 1e-2 if overload == "default" else torch.tensor(1e-2)
    cpu_out = packet(*_adam_args("cpu"), lr=lr, **ADAM_KWARGS)
    tpu_args = _adam_args("tpu")
    inputs = [[t.cpu() for t in ts] for ts in tpu_args]
    before = _device_quiet()
    tpu_out = packet(*tpu_args, lr=lr, **ADAM_KWARGS)
    assert _device_quiet() == before
    for c_list, t_list in zip(cpu_out, tpu_out):
        for c, t in zip(c_list, t_list):
            torch.testing.assert_close(t.cpu(), c, **FP32_TOL)
    for ts, copies in zip(tpu_args, inputs):
        for t, copy in zip(ts, copies):
            assert torch.equal(t.cpu(), copy)


@pytest.mark.parametrize("overload", ["default", "tensor_lr"])
def test_functional_sgd_matches_cpu(overload):
    packet = getattr(torch.ops.aten._fused_sgd, overload)
    lr = 0.05 if overload == "default" else torch.tensor(0.05)

    def call(device):
        torch.manual_seed(4)
        lists = [[torch.randn(s).to(device) for s in SHAPES] for _ in range(3)]
        return packet(*lists, weight_decay=0.1, momentum=0.9, lr=lr, dampening=0.0,
                      nesterov=True, maximize=False, is_first_step=False)

    cpu_out = call("cpu")
    before = _device_quiet()
    tpu_out = call("tpu")
    assert _device_quiet() == before
    for c_list, t_list in zip(cpu_out, tpu_out):
        for c, t in zip(c_list, t_list):
            torch.testing.assert_close(t.cpu(), c, **FP32_TOL)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD", "Adagrad"])
def test_a_fused_step_is_one_program_in_strict_mode(name):
    """As the op is one kernel on CUDA: its _foreach_ ops are recorded and run together, not one
    program each (strict mode, the default). The step's result matches the foreach one."""
    kwargs = dict(momentum=0.9) if name == "SGD" else {}
    results = {}
    for fused in (True, False):
        params = _params("tpu", torch.float32, SHAPES)
        opt = getattr(torch.optim, name)(params, lr=0.1, fused=fused, foreach=not fused, **kwargs)
        for step in range(2):
            for p, g in zip(params, _grads(step, params, "tpu")):
                p.grad = g
            torch.tpu.synchronize()
            torchtpu.metrics.reset()
            opt.step()
            torch.tpu.synchronize()
        m = torchtpu.metrics.as_dict()
        assert m["op_by_op_windows"] == 0  # the window's program is waited for, never run op by op
        results[fused] = ([p.detach().cpu() for p in params], m["windows"], m["strict_ops"])
    assert torchtpu.get_eager_mode() == "strict"
    # fused: one recorded window, and at most torch.optim's own step-count increment op by op
    assert results[True][1:] in [(1, 0), (1, 1)]
    assert results[False][1] == 0 and results[False][2] > 1
    for a, b in zip(results[True][0], results[False][0]):
        torch.testing.assert_close(a, b, **FP32_TOL)


def test_a_first_fused_step_compiles_one_program():
    """On a cold compile cache the step compiles its one program, not also a program per op (as
    fused mode's op-by-op runs while a window compiles would). Shapes of this test only: cold."""
    params = _params("tpu", torch.float32, [(11, 13), (17,)])
    opt = torch.optim.AdamW(params, lr=0.1, fused=True)
    for p, g in zip(params, _grads(0, params, "tpu")):
        p.grad = g
    before = len(torchtpu.cache.stats()["compiles"])
    opt.step()
    torch.tpu.synchronize()
    names = [name for name, _, _ in torchtpu.cache.stats()["compiles"][before:]]
    # one window (zero fills for the new states compile in the background, in any order)
    assert len([n for n in names if "window" in n]) == 1, names
    # besides it, at most torch.optim's own step-count increment (before the kernel)
    singles = {n.split(" ")[0] for n in names if n.startswith("aten::_foreach")}
    assert singles <= {"aten::_foreach_add_.Scalar"}, names
