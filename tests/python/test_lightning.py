"""Lightning on tpu (python/torchtpu/integrations/lightning.py): the Trainer and Fabric train on the
tpu device, step for step like accelerator="cpu", with zero CPU fallbacks; bf16-mixed autocasts on
tpu."""

import math

import pytest
import torch
import torch.nn.functional as F

import torchtpu

pl = pytest.importorskip("pytorch_lightning")
from lightning_fabric import Fabric  # noqa: E402

from torchtpu.integrations.lightning import TorchTPUAccelerator  # noqa: E402

STEPS = 8
BATCH = 8

# Float32 on both devices: XLA may sum in another order and fuse multiply-adds, a few ulp per op
# (~1e-7 relative); over 8 steps of an MLP that stays near 1e-6. 1e-5 leaves headroom yet is far
# below what a wrong gradient or a skipped step changes (the loss moves by ~1e-2 per step).
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def _no_fallbacks():
    torchtpu.metrics.reset()
    yield
    assert torchtpu.metrics.cpu_fallbacks() == {}


def _loader():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(STEPS * BATCH, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g) + 0.05 * torch.randn(STEPS * BATCH, 1, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = _net()
        self.losses, self.devices, self.out_dtypes = [], set(), set()

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.net(x)
        loss = F.mse_loss(out.float(), y)
        # Where the step really ran: parameters, batch and the layer's output dtype.
        self.devices |= {p.device.type for p in self.parameters()} | {x.device.type, y.device.type}
        self.out_dtypes.add(out.dtype)
        self.losses.append(loss.item())
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.02, momentum=0.9)


def _fit(accelerator, precision="32-true", **options):
    model = Regression()
    options = {"logger": False, "enable_checkpointing": False, **options}
    trainer = pl.Trainer(max_steps=STEPS, accelerator=accelerator, devices=1, precision=precision,
                         enable_progress_bar=False, enable_model_summary=False, **options)
    trainer.fit(model, _loader())
    return model, trainer


def test_trainer_matches_cpu():
    tpu, trainer = _fit(TorchTPUAccelerator())
    cpu, _ = _fit("cpu")
    assert trainer.strategy.root_device == torch.device("tpu", 0)
    assert tpu.devices == {"tpu"} and cpu.devices == {"cpu"}
    assert len(tpu.losses) == STEPS
    torch.testing.assert_close(torch.tensor(tpu.losses), torch.tensor(cpu.losses), rtol=RTOL, atol=ATOL)
    # Lightning moves the model back to the CPU at teardown; the trained weights agree too.
    for pt, pc in zip(tpu.parameters(), cpu.parameters()):
        torch.testing.assert_close(pt, pc, rtol=RTOL, atol=ATOL)


def test_default_checkpointing_with_logged_metrics(tmp_path):
    """ModelCheckpoint (on by default) deep-copies the logged tpu metrics; the checkpoint holds the
    trained weights and loads on the CPU."""
    model, _ = _fit("torchtpu", enable_checkpointing=True, default_root_dir=str(tmp_path))
    saved, = tmp_path.rglob("*.ckpt")
    state = torch.load(saved, map_location="cpu", weights_only=False)
    assert state["global_step"] == STEPS
    for name, value in model.state_dict().items():
        torch.testing.assert_close(state["state_dict"][name], value.cpu(), rtol=0, atol=0)


def test_trainer_bf16_mixed_autocasts_on_tpu():
    model, trainer = _fit("torchtpu", precision="bf16-mixed")
    assert trainer.precision_plugin.device == "tpu"
    assert model.devices == {"tpu"} and model.out_dtypes == {torch.bfloat16}
    losses = model.losses
    assert len(losses) == STEPS and all(math.isfinite(v) for v in losses)
    assert sum(losses[-2:]) < 0.25 * sum(losses[:2]), losses  # float32 on CPU: 6.5, 4.2 ... 0.86, 0.29
    # The first step (initial weights) computes what CPU autocast computes in bfloat16, which is
    # not the float32 loss: the layers really ran in bfloat16.
    x, y = next(iter(_loader()))
    net = _net()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = F.mse_loss(net(x).float(), y).item()
    # rel: one bfloat16 rounding of an output may fall the other way if XLA sums in another order.
    assert losses[0] == pytest.approx(bf16, rel=1e-3) and losses[0] != F.mse_loss(net(x), y).item()


def _fabric_train(accelerator):
    fabric = Fabric(accelerator=accelerator, devices=1)
    net = _net()
    model, opt = fabric.setup(net, torch.optim.SGD(net.parameters(), lr=0.02, momentum=0.9))
    losses, devices = [], set()
    for x, y in fabric.setup_dataloaders(_loader()):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        fabric.backward(loss)
        opt.step()
        devices |= {p.device.type for p in model.parameters()} | {x.device.type}
        losses.append(loss.item())
    return fabric, losses, devices


def test_fabric_matches_cpu():
    fabric, tpu, devices = _fabric_train("torchtpu")
    _, cpu, _ = _fabric_train("cpu")
    assert fabric.device == torch.device("tpu", 0) and devices == {"tpu"}
    torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=RTOL, atol=ATOL)


def test_accelerator_api():
    from pytorch_lightning.accelerators import AcceleratorRegistry, XLAAccelerator

    assert TorchTPUAccelerator.is_available()
    assert TorchTPUAccelerator.auto_device_count() == 1
    n = torch.tpu.device_count()
    assert TorchTPUAccelerator.parse_devices(1) == [0]
    assert TorchTPUAccelerator.parse_devices(-1) == TorchTPUAccelerator.parse_devices("-1") == list(range(n))
    assert TorchTPUAccelerator.parse_devices([0]) == TorchTPUAccelerator.parse_devices("0,") == [0]
    assert TorchTPUAccelerator.get_parallel_devices([0]) == [torch.device("tpu", 0)]
    with pytest.raises(Exception, match="distinct tpu devices"):
        TorchTPUAccelerator.parse_devices([n])
    stats = TorchTPUAccelerator().get_device_stats("tpu:0")
    assert "allocated_bytes.all.current" in stats
    # "torchtpu" is ours; Lightning's own "tpu" stays its torch_xla accelerator.
    assert AcceleratorRegistry["torchtpu"]["accelerator"] is TorchTPUAccelerator
    assert AcceleratorRegistry["tpu"]["accelerator"] is XLAAccelerator
    with pytest.raises(Exception, match="was given device cpu"):
        TorchTPUAccelerator().setup_device(torch.device("cpu"))


def test_connector_choices():
    from lightning_fabric.strategies import SingleDeviceStrategy as FabricSingle
    from pytorch_lightning.strategies import SingleDeviceStrategy

    trainer = pl.Trainer(accelerator="torchtpu", devices=1, precision="16-mixed", logger=False)
    assert trainer.precision_plugin.device == "tpu" and trainer.precision_plugin.scaler._device == "tpu"
    fabric = Fabric(accelerator=TorchTPUAccelerator(), devices=[0], precision="bf16-mixed")
    assert isinstance(fabric.strategy, FabricSingle) and fabric.strategy.precision.device == "tpu"
    # The explicit spelling, which does not rely on the connector hooks, picks the same.
    trainer = pl.Trainer(accelerator=TorchTPUAccelerator(), strategy=SingleDeviceStrategy("tpu"), logger=False)
    assert trainer.strategy.root_device.type == "tpu"
