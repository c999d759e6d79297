"""Training steps on tpu match CPU PyTorch step for step, with zero CPU fallbacks."""

import copy

import pytest
import torch

import torchtpu


def train(model, device, optimizer, batches):
    model = copy.deepcopy(model).to(device)
    opt = optimizer(model.parameters())
    losses = []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class TinyTransformer(torch.nn.Module):
    def __init__(self, vocab=50, d=32):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)))


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1))
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def cnn_case():
    model = SmallCNN()
    batches = [(torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))) for _ in range(20)]
    return model, (lambda p: torch.optim.AdamW(p, lr=1e-3)), batches


def mlp_case():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    batches = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(20)]
    return model, (lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)), batches


def transformer_case():
    model = TinyTransformer()
    batches = [(torch.randint(0, 50, (4, 10)), torch.randint(0, 50, (4, 10))) for _ in range(20)]
    return model, (lambda p: torch.optim.AdamW(p, lr=1e-3)), batches


@pytest.mark.parametrize("case", [mlp_case, cnn_case, transformer_case],
                         ids=["mlp_sgd_momentum", "cnn_adamw", "transformer_adamw"])
def test_losses_match_cpu_with_no_fallbacks(case):
    torch.manual_seed(0)
    model, optimizer, batches = case()
    want = train(model, "cpu", optimizer, batches)
    torchtpu.reset_counters()
    got = train(model, "tpu", optimizer, batches)
    assert torchtpu.metrics.cpu_fallbacks() == {}
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_transformer_with_dropout_trains_reproducibly_on_device():
    """Dropout draws from the tpu generator: the same seed gives the same losses, no fallbacks."""
    def losses():
        torch.manual_seed(1)
        model = TinyTransformer()
        for layer in model.enc.layers:
            layer.dropout.p = layer.dropout1.p = layer.dropout2.p = 0.1
        batches = [(torch.randint(0, 50, (4, 10)), torch.randint(0, 50, (4, 10))) for _ in range(5)]
        return train(model, "tpu", lambda p: torch.optim.AdamW(p, lr=1e-3), batches)

    torchtpu.reset_counters()
    first, second = losses(), losses()
    assert torchtpu.metrics.cpu_fallbacks() == {}
    assert first == second
    assert all(0 < loss < 10 for loss in first)
