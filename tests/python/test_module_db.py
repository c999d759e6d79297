"""PyTorch's module and optimizer databases on tpu (torchtpu.testing.modules) against CPU: in CI a
representative subset (the RNN family, the losses and pooling lowered for module_db, the
optimizers whose device paths needed fixes). Every sample must pass on the device, none through a
CPU fallback. The full sweep is `python -m torchtpu.testing.modules` (docs/conformance.md)."""

import json

import pytest

from torchtpu.testing import modules

# nn.CTCLoss is left to the sweep (its 80 samples compile for 4 minutes; test_lowerings.py has a case)
MODULES = ["nn.LSTM", "nn.GRU", "nn.RNN", "nn.LSTMCell", "nn.GRUCell", "nn.RNNCell",
           "nn.MultiMarginLoss", "nn.MultiLabelMarginLoss", "nn.AdaptiveMaxPool2d",
           "nn.CrossEntropyLoss", "nn.KLDivLoss", "nn.TransformerEncoderLayer"]
OPTIMIZERS = ["Adam", "Adagrad", "NAdam", "SGD"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("module_db") / "report.json"
    modules.main(["--json", str(path), "--modules", *MODULES, "--optimizers", *OPTIMIZERS,
                  "--jobs", "2"])
    with open(path) as f:
        return json.load(f)


def _rows(report, kind):
    return [(name, variant, row) for name, variants in report["rows"][kind].items()
            for variant, row in variants.items()]


def test_every_module_sample_passes_on_the_device(report):
    rows = _rows(report, "module")
    assert {name for name, _, _ in rows} == set(MODULES)
    for name, mode, row in rows:
        assert row["samples"] > 0, (name, mode)
        assert row["passed"] == row["samples"], (name, mode, row["failures"], row["fallback_ops"])


def test_every_optimizer_configuration_matches_cpu_on_the_device(report):
    rows = _rows(report, "optim")
    assert {name for name, _, _ in rows} == set(OPTIMIZERS)
    assert {variant.split()[0] for name, variant, _ in rows if name == "Adam"} == {
        "forloop", "foreach", "fused", "differentiable"}
    for name, variant, row in rows:
        assert row["samples"] > 0, (name, variant)
        assert row["passed"] == row["samples"], (name, variant, row["failures"], row["fallback_ops"])
