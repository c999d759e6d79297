"""Models written here in plain PyTorch, for what the libraries' zoos do not cover: stacked
recurrent layers, and sparse embedding gradients (DLRM's shape).

Importing this module registers them in ``MODELS``."""

from .specs import VOCAB, Spec, gen, register, tokens


# ---------------------------------------------------------------------------------------------
# Recurrent networks
# ---------------------------------------------------------------------------------------------

def _rnn_lm():
    from torch import nn

    class RNNLM(nn.Module):
        """A language model of stacked recurrent layers: a 2-layer LSTM, then a bidirectional GRU."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 16)
            self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
            self.gru = nn.GRU(32, 32, batch_first=True, bidirectional=True)
            self.head = nn.Linear(64, VOCAB)

        def forward(self, ids):
            h, _ = self.lstm(self.embed(ids))
            h, _ = self.gru(h)
            return self.head(h)

    return RNNLM()


def _rnn_loss(model, batch):
    import torch.nn.functional as F
    ids = batch["input_ids"]
    return F.cross_entropy(model(ids)[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


register(Spec("lstm_gru_lm", "recurrent", _rnn_lm, lambda s: {"input_ids": tokens(gen(s))}, _rnn_loss,
              note="embedding, 2-layer LSTM, bidirectional GRU, next-token loss"))


# ---------------------------------------------------------------------------------------------
# Recommendation: sparse embedding gradients
# ---------------------------------------------------------------------------------------------

def _dlrm():
    import torch
    from torch import nn

    class DLRM(nn.Module):
        """DLRM's shape: categorical features summed through EmbeddingBag(sparse=True) tables, dense
        features through a bottom MLP, their pairwise dot products into a top MLP."""

        def __init__(self, tables=(50, 30, 20), dim=8, dense=4):
            super().__init__()
            self.tables = nn.ModuleList(nn.EmbeddingBag(n, dim, mode="sum", sparse=True) for n in tables)
            self.bottom = nn.Sequential(nn.Linear(dense, 16), nn.ReLU(), nn.Linear(16, dim), nn.ReLU())
            features = len(tables) + 1
            self.top = nn.Sequential(nn.Linear(dim + features * (features - 1) // 2, 16), nn.ReLU(), nn.Linear(16, 1))

        def forward(self, dense, ids, offsets):
            features = [self.bottom(dense)] + [t(i, o) for t, i, o in zip(self.tables, ids, offsets)]
            stacked = torch.stack(features, 1)
            dots = stacked @ stacked.transpose(1, 2)
            i, j = torch.triu_indices(len(features), len(features), 1, device=dots.device)
            return self.top(torch.cat([features[0], dots[:, i, j]], 1)).squeeze(1)

    return DLRM()


def _dlrm_batch(step, batch=8, tables=(50, 30, 20)):
    """Each sample has 0-3 ids per table (an empty bag too), as offsets into a flat id list."""
    import torch
    g = gen(step)
    ids, offsets = [], []
    for size in tables:
        counts = torch.randint(0, 4, (batch,), generator=g)
        ids.append(torch.randint(0, size, (int(counts.sum()),), generator=g))
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)[:-1]]))
    return {"dense": torch.randn(batch, 4, generator=g), "ids": ids, "offsets": offsets,
            "labels": torch.randint(0, 2, (batch,), generator=g).float()}


def _dlrm_loss(model, batch):
    import torch
    logits = model(batch["dense"], batch["ids"], batch["offsets"])
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["labels"])


register(Spec("dlrm", "recommendation", _dlrm, _dlrm_batch, _dlrm_loss, optimizer="adagrad",
              note="3 EmbeddingBag(sparse=True) tables, 8 samples; Adagrad takes the sparse gradients"))
