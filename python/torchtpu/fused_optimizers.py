"""tpu kernels of the fused optimizer ops ``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``,
``_fused_adagrad_``.

``torch.optim.Adam/AdamW/SGD/Adagrad(fused=True)`` (and Hugging Face's default ``adamw_torch_fused``) call
these ops once per step. Without a tpu kernel they ran through the CPU fallback, which copies every
parameter, gradient and state to the host and back. The kernels here are ``PrivateUse1``
implementations registered through ``torch.library`` and composed of ``_foreach_*`` ops (one
program for a whole list) and a few 0-d tensor ops, so a step stays on the device: no ``.item()``,
no host copy, no Python branch on a tensor value.

The math is that of PyTorch's fused CPU kernels (aten/src/ATen/native/cpu/FusedAdamKernel.cpp,
FusedSGDKernel.cpp, FusedAdagradKernel.cpp), which is also the CUDA kernels':

- ``grad_scale`` divides the gradients and the unscaled gradients are written back to ``grads``;
- ``found_inf == 1`` skips the whole update (gradients included). On the device this is masking,
  not a branch: the coefficients become those of an identity update and the (non-finite) gradients
  are replaced by zeros, so every state is written back bit for bit unchanged;
- reduced-precision (bfloat16/float16) tensors are computed in float32 and rounded once when
  stored, as the kernels do;
- ``state_steps`` are read, not written: ``torch.optim`` increments them before the call (and
  takes ``found_inf`` off after it), as the schemas say (``Tensor[] state_steps``, no ``(a!)``).

Only the in-place overloads (``.default``, ``.tensor_lr``) are registered: the functional and
``.out`` variants (``_fused_adamw``, ``_fused_adamw.out``, ...), which functionalization uses, are
CompositeExplicitAutograd kernels in PyTorch that clone and call the in-place op, so they reach
these kernels too.
"""

import contextlib
import math

import torch

from . import modes

_lib = None

_REDUCED = (torch.bfloat16, torch.float16)


# One program per step -----------------------------------------------------------------------------

@contextlib.contextmanager
def _one_program():
    """A fused kernel's ops run as one program, as the op is one kernel on CUDA
    (:func:`torchtpu.modes.one_program`: recorded in lazy mode, whose program compiles when
    missing, where fused mode would compile a program per op too while the window compiles)."""
    with modes.one_program(), torch.no_grad():
        yield


# Working copies ----------------------------------------------------------------------------------

def _opmath(tensors):
    """The tensors to compute on: float32 copies of reduced-precision ones (the fused kernels load
    bfloat16/float16 into float32 and round only at the store), the tensors themselves otherwise."""
    low = [t for t in tensors if t.dtype in _REDUCED]
    if not low:
        return tensors
    work = [torch.empty_like(t, dtype=torch.float32) if t.dtype in _REDUCED else t for t in tensors]
    torch._foreach_copy_([w for w, t in zip(work, tensors) if w is not t], low)
    return work


def _store(tensors, work):
    """Writes float32 working copies back (rounding to nearest even, as the kernels' stores)."""
    pairs = [(t, w) for t, w in zip(tensors, work) if w is not t]
    if pairs:
        torch._foreach_copy_([t for t, _ in pairs], [w for _, w in pairs])


# Skipping a step (found_inf) without a host sync --------------------------------------------------

def _skip_flag(found_inf, device):
    """0-d bool on the device, true when the kernels skip the step (they test found_inf == 1)."""
    if found_inf is None:
        return None
    return found_inf.to(device) == 1


def _gates(skip, pairs):
    """``[(value, identity), ...]``: each value for a step that runs, its identity (the coefficient
    that leaves a state as it is) for a skipped one.

    Without ``found_inf`` the values come back as they are: Python floats stay floats, which are
    runtime operands here (a changing learning rate never recompiles). With it, the float gates are
    uploaded as two small vectors (rounded to float32 from double on the host, as the kernels round
    their coefficients) and selected by one ``where``; a tensor value (from a tensor lr) gets a
    ``masked_fill``. ``torch.where`` on Python scalars would cost a program per scalar."""
    if skip is None:
        return [value for value, _ in pairs]
    floats = [i for i, (value, _) in enumerate(pairs) if not isinstance(value, torch.Tensor)]
    out = [value.masked_fill(skip, identity) if isinstance(value, torch.Tensor) else None
           for value, identity in pairs]
    if floats:
        values, identities = (torch.tensor([pairs[i][k] for i in floats], dtype=torch.float32)
                              .to(skip.device) for k in (0, 1))
        for i, gate in zip(floats, torch.where(skip, identities, values).unbind(0)):
            out[i] = gate
    return out


def _working_grads(grads, grad_scale, skip):
    """The gradients the update reads: unscaled (and written back unscaled, as the kernels do), and
    zeros where the step is skipped, so that the masked update never meets an inf or nan."""
    g = _opmath(grads)
    if grad_scale is not None:
        # Dividing by 1 on a skipped step leaves the stored gradients exactly as they were.
        (divisor,) = _gates(skip, [(grad_scale.to(g[0].device), 1.0)])
        torch._foreach_div_(g, divisor)
        _store(grads, g)
    if skip is not None:
        # 0 * inf is nan, so gated coefficients alone cannot hide a non-finite gradient. One
        # program per tensor: no foreach op selects.
        g = [t.masked_fill(skip, 0.0) for t in g]
    return g


def _per_tensor(c, n):
    """A coefficient as the argument of a foreach op: a float as it is, a 0-d tensor repeated into
    a list (the list overloads; ``_foreach_add_.Tensor`` reads its operand back to the host)."""
    return [c] * n if isinstance(c, torch.Tensor) else c


def _axpy_(ys, xs, a):
    """ys += xs * a, with ``a`` a Python number or a 0-d device tensor."""
    if isinstance(a, torch.Tensor):
        torch._foreach_add_(ys, torch._foreach_mul(xs, a))
    else:
        torch._foreach_add_(ys, xs, alpha=a)


def _device_lr(lr, device):
    """A tensor learning rate as a float32 0-d tensor on the device (a CPU one is uploaded, never
    read on the host); a float stays a float."""
    if isinstance(lr, torch.Tensor):
        return lr.to(device=device, dtype=torch.float32)
    return lr


# Adam / AdamW -------------------------------------------------------------------------------------

def _bias_correction(steps, beta):
    """``1 - beta ** step`` for a 1-D tensor of steps. The kernels compute it in double; in float32
    ``1 - 0.999 ** step`` would lose three digits to cancellation (0.999 itself is off by 1e-8), so
    it is ``-expm1(step * log(beta))`` with ``log(beta)`` taken in double on the host."""
    if beta > 0:
        return torch.expm1(steps * math.log(beta)).neg_()
    return 1 - torch.pow(beta, steps)  # log undefined; beta ** step is exact for beta == 0 anyway


def _adam_step_sizes(state_steps, neg_lr, beta1, beta2):
    """Per tensor: ``-lr / bias_correction1`` and ``sqrt(bias_correction2)``, as lists of 0-d
    views. The steps are stacked into one vector first: a handful of one-program ops then serve
    the whole list (``_foreach_expm1``/``_foreach_pow(Scalar, list)`` run a program per tensor)."""
    steps = torch.stack(state_steps).to(torch.float32)
    if not isinstance(neg_lr, torch.Tensor):
        # A CPU 0-d tensor is a runtime operand like a Scalar, and float / tensor would be
        # reciprocal-then-multiply (two roundings where the kernels divide once).
        neg_lr = torch.tensor(neg_lr, dtype=torch.float32)
    neg_step = torch.div(neg_lr, _bias_correction(steps, beta1))
    bc2_sqrt = _bias_correction(steps, beta2).sqrt_()
    return neg_step.unbind(0), bc2_sqrt.unbind(0)


def _adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
          weight_decay, eps, amsgrad, maximize, grad_scale, found_inf, decoupled):
    if not params:
        return
    device = params[0].device
    lr = _device_lr(lr, device)
    skip = _skip_flag(found_inf, device)
    steps = [t if t.device == device else t.to(device) for t in state_steps]
    p, m, v = _opmath(params), _opmath(exp_avgs), _opmath(exp_avg_sqs)
    vmax = _opmath(max_exp_avg_sqs) if amsgrad else None

    # The identities make a skipped step write every state back unchanged (max_exp_avg_sq too:
    # it is never below exp_avg_sq). eps -> 1 keeps denom > 0, so the zero update
    # (0 * exp_avg / denom) stays 0 even when eps == 0.
    decay = 1 - lr * weight_decay if decoupled and weight_decay != 0 else 1.0
    decay, w1, b2, c2, eps, neg_lr = _gates(skip, [
        (decay, 1.0), (1 - beta1, 0.0), (beta2, 1.0), (1 - beta2, 0.0), (eps, 1.0), (-lr, 0.0)])

    g = _working_grads(grads, grad_scale, skip)
    if maximize:
        g = torch._foreach_neg(g)
    if weight_decay != 0:
        if decoupled:  # AdamW: param *= 1 - lr * wd, the factor taken in double as the kernel does
            torch._foreach_mul_(p, decay)
        else:  # Adam: L2 penalty added to the gradient
            g = torch._foreach_add(g, p, alpha=weight_decay)

    # exp_avg.lerp_(grad, 1 - beta1) as the kernels write it. The tpu lerp is exp_avg + w * (grad
    # - exp_avg), the kernels' formula for w < 0.5 (beta1 > 0.5, the usual case; otherwise an ulp
    # apart); w = 0 gives exactly exp_avg.
    torch._foreach_lerp_(m, g, _per_tensor(w1, len(m)))
    # exp_avg_sq = exp_avg_sq * beta2 + ((1 - beta2) * grad) * grad, the kernels' order
    torch._foreach_mul_(v, b2)
    torch._foreach_addcmul_(v, torch._foreach_mul(g, c2), g)
    if amsgrad:
        torch._foreach_maximum_(vmax, v)

    neg_step, bc2_sqrt = _adam_step_sizes(steps, neg_lr, beta1, beta2)
    denom = torch._foreach_sqrt(vmax if amsgrad else v)
    torch._foreach_div_(denom, bc2_sqrt)
    torch._foreach_add_(denom, _per_tensor(eps, len(denom)))
    update = torch._foreach_mul(m, neg_step)
    torch._foreach_div_(update, denom)
    torch._foreach_add_(p, update)

    for tensors, work in ((params, p), (exp_avgs, m), (exp_avg_sqs, v)):
        _store(tensors, work)
    if amsgrad:
        _store(max_exp_avg_sqs, vmax)


def _adam_kernel(decoupled):
    def kernel(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1,
               beta2, weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
        with _one_program():
            _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr=lr,
                  beta1=beta1, beta2=beta2, weight_decay=weight_decay, eps=eps, amsgrad=amsgrad,
                  maximize=maximize, grad_scale=grad_scale, found_inf=found_inf,
                  decoupled=decoupled)

    kernel.__name__ = "fused_adamw_" if decoupled else "fused_adam_"
    return kernel


# Adagrad ------------------------------------------------------------------------------------------

def _adagrad(params, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps, maximize,
             grad_scale, found_inf):
    if not params:
        return
    device = params[0].device
    lr = _device_lr(lr, device)
    skip = _skip_flag(found_inf, device)
    p, s = _opmath(params), _opmath(state_sums)
    # A skipped step meets zero gradients (see _working_grads) and a zero weight decay:
    # state_sum += 0 and the update is 0 / std, with eps -> 1 so that std > 0 even when state_sum
    # and eps are 0.
    eps, decay = _gates(skip, [(eps, 1.0), (weight_decay, 0.0)])
    g = _working_grads(grads, grad_scale, skip)
    if maximize:
        g = torch._foreach_neg(g)
    if weight_decay != 0:
        g = torch._foreach_add(g, torch._foreach_mul(p, decay) if skip is not None else p,
                               alpha=1 if skip is not None else decay)
    # clr = lr / (1 + (step - 1) * lr_decay) per tensor, from one vector of the steps
    steps = torch.stack([t.to(device) for t in state_steps]).to(torch.float32)
    neg_lr = -lr if isinstance(lr, torch.Tensor) else torch.tensor(-lr, dtype=torch.float32)
    neg_clr = torch.div(neg_lr, (steps - 1) * lr_decay + 1).unbind(0)
    torch._foreach_addcmul_(s, g, g)
    std = torch._foreach_sqrt(s)
    torch._foreach_add_(std, _per_tensor(eps, len(std)))
    update = torch._foreach_mul(g, neg_clr)
    torch._foreach_div_(update, std)
    torch._foreach_add_(p, update)
    _store(params, p)
    _store(state_sums, s)


def _adagrad_kernel(self, grads, state_sums, state_steps, *, lr, lr_decay, weight_decay, eps,
                    maximize, grad_scale=None, found_inf=None):
    with _one_program():
        _adagrad(self, grads, state_sums, state_steps, lr=lr, lr_decay=lr_decay,
                 weight_decay=weight_decay, eps=eps, maximize=maximize, grad_scale=grad_scale,
                 found_inf=found_inf)


# SGD ----------------------------------------------------------------------------------------------

def _sgd(params, grads, momentum_buffers, *, weight_decay, momentum, lr, dampening, nesterov,
         maximize, is_first_step, grad_scale, found_inf):
    if not params:
        return
    device = params[0].device
    lr = _device_lr(lr, device)
    skip = _skip_flag(found_inf, device)
    p = _opmath(params)
    # A skipped step keeps the buffers (momentum -> 1, 1 - dampening -> 0) and params (lr -> 0).
    keep_buf, grad_weight, neg_lr = _gates(
        skip, [(momentum, 1.0), (1 - dampening, 0.0), (-lr, 0.0)])

    g = _working_grads(grads, grad_scale, skip)
    if maximize:
        g = torch._foreach_neg(g)
    if weight_decay != 0:
        g = torch._foreach_add(g, p, alpha=weight_decay)
    if momentum != 0:
        if is_first_step:
            # The buffers are fresh (torch.optim makes them with empty_like): the gradient is the
            # buffer. A skipped first step leaves zeros where the kernels leave them uninitialized.
            buf = g
            torch._foreach_copy_(momentum_buffers, g)
        else:
            buf = _opmath(momentum_buffers)
            torch._foreach_mul_(buf, keep_buf)
            _axpy_(buf, g, grad_weight)
            _store(momentum_buffers, buf)
        g = torch._foreach_add(g, buf, alpha=momentum) if nesterov else buf
    _axpy_(p, g, neg_lr)
    _store(params, p)


def _sgd_kernel(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening,
                nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    with _one_program():
        _sgd(self, grads, momentum_buffer_list, weight_decay=weight_decay, momentum=momentum, lr=lr,
             dampening=dampening, nesterov=nesterov, maximize=maximize,
             is_first_step=is_first_step, grad_scale=grad_scale, found_inf=found_inf)


def register() -> None:
    """Registers the tpu kernels of the fused optimizer ops; idempotent."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    kernels = {
        "_fused_adam_": _adam_kernel(decoupled=False),
        "_fused_adamw_": _adam_kernel(decoupled=True),
        "_fused_sgd_": _sgd_kernel,
        "_fused_adagrad_": _adagrad_kernel,
    }
    for name, kernel in kernels.items():
        # The float-lr and tensor-lr overloads take the same arguments; the kernel handles both.
        lib.impl(name, kernel, "PrivateUse1")
        lib.impl(name + ".tensor_lr", kernel, "PrivateUse1")
    _lib = lib
