"""A few models of the zoo (torchtpu.testing.zoo) train on tpu exactly as on CPU: the same loss
at every step, the same greedy generation, and no op falling back to the CPU.

The full zoo, with a trace of where a model diverges, is
``python -m torchtpu.testing.models --json FILE --markdown docs/models.md``."""

import pytest

from torchtpu.testing import zoo

# a few seconds each on a 2-core machine, compiles included
SUBSET = ["gpt2", "llama", "bert", "convnext_mini", "dlrm"]


def _explain(rec):
    lines = [f"{rec.model}: status {rec.status}"]
    if rec.error:
        lines.append(f"error: {rec.error}")
    if rec.loss_cpu:
        lines.append(f"losses CPU {rec.loss_cpu}, tpu {rec.loss_tpu}")
    tr = rec.trace or {}
    if tr.get("first_divergence"):
        fd = tr["first_divergence"]
        lines.append(f"first divergence: {fd['op']} in {fd['where']}: {fd['note'] or fd['rel']}")
    if tr.get("replay_mismatches"):
        lines.append(f"ops wrong on replay: {tr['replay_mismatches']}")
    return "\n".join(lines)


@pytest.mark.parametrize("name", SUBSET)
def test_model_trains_like_cpu(name):
    rec = zoo.run_model(name)
    why = _explain(rec)
    assert rec.error is None, why
    assert rec.loss_parity, why
    assert rec.loss_rel_diff <= zoo.LOSS_RTOL, why  # these are well-conditioned: no noise allowance
    if zoo.MODELS[name].generate is not None:
        assert rec.generate_parity, f"generated CPU {rec.generated_cpu}, tpu {rec.generated_tpu}"
    assert rec.fallbacks == {}, f"ops that fell back to the CPU: {rec.fallbacks}"


@pytest.mark.parametrize("name", ["llama", "convnext_mini", "dlrm"])
def test_model_trains_like_cpu_compiled(name):
    """The zoo's --compile sweep in little: forward and backward through torch.compile(backend="tpu")."""
    rec = zoo.run_model(name, compiled=True)
    why = _explain(rec)
    assert rec.error is None, why
    assert rec.loss_rel_diff <= zoo.LOSS_RTOL, why
    assert rec.graphs >= 1 and rec.graph_breaks == 0, why
    assert rec.fallbacks == {}, f"ops that fell back to the CPU: {rec.fallbacks}"


def test_zoo_lists_the_families():
    families = {s.family for s in zoo.MODELS.values()}
    assert {"HF decoder", "HF encoder", "HF encoder-decoder", "torchvision classification",
            "torchvision detection", "torchvision segmentation", "recommendation"} <= families


_WRONG_TANH = r"""
import json, sys, warnings
import torch, torchtpu
from torchtpu.testing import zoo
from torchtpu.testing.zoo import specs, vision
warnings.filterwarnings("ignore")
lib = torch.library.Library("aten", "IMPL")
lib.impl("tanh", lambda x: (x.cpu().tanh() * 1.001).to(x.device), "PrivateUse1")  # off by 0.1%
def batch(step):
    g = specs.gen(step)
    return {"pixel_values": torch.randn(4, 8, generator=g), "labels": torch.randint(0, 4, (4,), generator=g)}
zoo.register(zoo.Spec("mlp", "test", lambda: torch.nn.Sequential(
    torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)), batch, vision.tv_cls_loss, optimizer="sgd"))
json.dump(zoo.run_model("mlp").to_dict(), sys.stdout, default=str)
"""


def test_harness_names_a_wrong_lowering():
    """A tanh made 0.1% wrong on tpu: the sweep reports the mismatch, the first divergence at that
    tanh (whose inputs were still equal), and the replay names it."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _WRONG_TANH], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "mismatch"
    fd = rec["trace"]["first_divergence"]
    assert fd["op"] == "aten::tanh" and fd["where"] == "step 1 forward: 1" and fd["input_rel"] == 0.0
    assert list(rec["trace"]["replay_mismatches"]) == ["aten::tanh"]


def test_a_diverging_cpu_reference_is_an_error_not_a_match():
    """NaN losses on both sides compared equal, so a model that blew up on CPU and on tpu alike
    (Mask R-CNN at this size) counted as a pass."""
    import torch

    def batch(step):
        return {"pixel_values": torch.ones(2, 4), "labels": torch.zeros(2, dtype=torch.long)}

    zoo.register(zoo.Spec("nan_linear", "test", lambda: torch.nn.Linear(4, 2), batch,
                          lambda model, b: model(b["pixel_values"]).sum() * float("nan"), optimizer="sgd"))
    try:
        rec = zoo.run_model("nan_linear")
    finally:
        del zoo.MODELS["nan_linear"]
    assert rec.status == "error" and "CPU reference diverged" in rec.error, rec
