"""One training run of a zoo model on one device: the optimizer, the steps, greedy generation.
The same function runs the CPU reference, the tpu run, the noise runs and the traced runs, so
they differ only in device, dtype and what watches them."""

import time
import traceback

from ..compare import to_device


def perturbed(model, seed):
    """``model`` with every floating parameter moved by one float32 rounding error (relative 2^-24,
    random sign): what any other float32 implementation may do to it."""
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                sign = torch.randint(0, 2, p.shape, generator=g).to(p.dtype) * 2 - 1
                p.mul_(1 + sign * 2.0 ** -24)
    return model


def zero_dropout(model):
    """Dropout off in every module (configs say 0 too): random masks cannot match across devices."""
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0


def _optimizer(kind, params):
    import torch
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4, foreach=True)
    if kind == "adagrad":  # sparse and dense gradients alike (foreach takes no sparse ones)
        return torch.optim.Adagrad(params, lr=0.05)
    return torch.optim.AdamW(params, lr=1e-3, foreach=True)


def error_text(e):
    """An exception as one line of at most 1500 characters (its first 6 non-empty lines)."""
    text = f"{type(e).__name__}: {e}".strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return " ".join(lines[:6])[:1500]


def execute(spec, model, device, batches, steps, do_generate, phase=lambda label: None,
            keep_state=False, compiled=False):
    """Trains ``model`` (already initialized) on ``device`` for ``steps`` steps, then generates;
    ``compiled``: the loss runs through ``torch.compile(model, backend="tpu")``; ``phase(label)``
    is told each step's part before it runs (the tracer tags ops with it).
    -> {"losses", "generated", "error", "traceback", "train_s", "generate_s", "state"}."""
    import torch
    out = {"losses": [], "generated": None, "error": None}
    torch.manual_seed(0)
    t0 = time.perf_counter()
    try:
        phase("to device")
        model = model.to(device)
        _train(spec, model, device, batches, steps, phase, compiled, out["losses"])
        out["train_s"] = time.perf_counter() - t0
        if do_generate and spec.generate is not None:
            t1 = time.perf_counter()
            out["generated"] = _generate(spec, model, device, batches[0], phase)
            out["generate_s"] = time.perf_counter() - t1
        if keep_state:
            phase("state_dict")
            out["state"] = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
        out["error"] = error_text(e)
        out["traceback"] = traceback.format_exc()[-4000:]
    out["total_s"] = time.perf_counter() - t0
    return out


def _train(spec, model, device, batches, steps, phase, compiled, losses):
    """The training steps; each step's loss is appended to ``losses`` as soon as it is known, so
    a step that raises leaves the earlier ones."""
    import torch
    model.train()
    opt = _optimizer(spec.optimizer, [p for p in model.parameters() if p.requires_grad])
    forward = torch.compile(model, backend="tpu") if compiled else model
    for step in range(steps):
        batch = to_device(batches[step], device)
        phase(f"step {step + 1} forward")
        loss = spec.loss(forward, batch)
        phase(f"step {step + 1} backward")
        loss.backward()
        phase(f"step {step + 1} optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        phase(f"step {step + 1} loss.item")
        losses.append(loss.item())


def _generate(spec, model, device, batch, phase):
    """Greedy generation from the first batch, as token ids on the CPU (a list)."""
    import torch
    phase("generate")
    model.eval()
    with torch.no_grad():
        return spec.generate(model, to_device(batch, device)).cpu().tolist()


def dynamo_counts():
    """How Dynamo split the compiled run: -> (graphs compiled, graph breaks, the 3 most frequent
    break reasons with their counts)."""
    from torch._dynamo.utils import counters
    breaks = dict(counters["graph_break"])
    reasons = {k.split("\n")[0][:160]: v for k, v in sorted(breaks.items(), key=lambda kv: -kv[1])[:3]}
    return counters["stats"]["unique_graphs"], sum(breaks.values()), reasons
