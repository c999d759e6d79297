"""The benchmark workloads as PyTorch modules, shared by every benchmark script."""

import torch
import torch.nn.functional as F


class DecoderBlock(torch.nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d_model)
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.proj = torch.nn.Linear(d_model, d_model)
        self.ln2 = torch.nn.LayerNorm(d_model)
        self.fc1 = torch.nn.Linear(d_model, 4 * d_model)
        self.fc2 = torch.nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(torch.nn.Module):
    """A GPT-style decoder: token + position embeddings, pre-norm blocks, tied-free LM head."""

    def __init__(self, vocab=1024, d_model=256, heads=4, layers=4, seq=128):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d_model)
        self.pos = torch.nn.Embedding(seq, d_model)
        self.blocks = torch.nn.ModuleList(DecoderBlock(d_model, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d_model)
        self.head = torch.nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def gpt_batches(steps, batch=8, seq=128, vocab=1024, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, vocab, (batch, seq), generator=g), torch.randint(0, vocab, (batch, seq), generator=g))
            for _ in range(steps)]


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def mlp(d_in=256, hidden=512, classes=10):
    return torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, classes))


class ResidualBlock(torch.nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c_out)
        self.conv2 = torch.nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c_out)
        self.shortcut = None
        if stride != 1 or c_in != c_out:
            self.shortcut = torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                                torch.nn.BatchNorm2d(c_out))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(torch.nn.Module):
    """A small ResNet-style CNN: a stem, residual stages, global average pooling, a classifier."""

    def __init__(self, widths=(16, 32, 64), classes=10):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
                                        torch.nn.BatchNorm2d(widths[0]), torch.nn.ReLU())
        blocks, c = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(ResidualBlock(c, w, 1 if i == 0 else 2))
            c = w
        self.blocks = torch.nn.Sequential(*blocks)
        self.fc = torch.nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(self.blocks(self.stem(x)).mean(dim=(2, 3)))


def workload(name, sizes):
    """The model of a training or inference workload and its batch (x, y), from a fixed seed: every
    runtime of benchmarks/run.py starts from these."""
    torch.manual_seed(0)
    if name == "mlp_train":
        model = mlp(sizes["d_in"], sizes["hidden"])
        x, y = torch.randn(sizes["batch"], sizes["d_in"]), torch.randint(0, 10, (sizes["batch"],))
    elif name.startswith("gpt"):
        model = GPT(sizes["vocab"], sizes["d_model"], sizes["heads"], sizes["layers"], sizes["seq"])
        x, y = gpt_batches(1, sizes["batch"], sizes["seq"], sizes["vocab"])[0]
    else:
        model = ResNet(sizes["widths"])
        x = torch.randn(sizes["batch"], 3, sizes["image"], sizes["image"])
        y = torch.randint(0, 10, (sizes["batch"],))
    return model, x, y
