"""Text for the trainer, tokenized as bytes, and the batches drawn from it.

Batches are a pure function of (seed, step, micro-batch, rank): a resumed run draws exactly the
batches the uninterrupted run would have, with no data-loader state in the checkpoint.
"""

import ast
import glob
import sysconfig
from pathlib import Path

import torch

VOCAB_SIZE = 256  # byte-level: every text is its UTF-8 bytes


def read_corpus(text: str, max_bytes: int) -> torch.Tensor:
    """The corpus as a uint8 tensor. Two corpora are on every machine with Python:
    "python-docstrings" (the English prose of the standard library's docstrings) and
    "python-stdlib" (its source code); anything else is a path or glob of text files."""
    if text == "python-docstrings":
        documents = (_docstrings(path) for path in _stdlib_files())
    else:
        files = _stdlib_files() if text == "python-stdlib" else sorted(glob.glob(text, recursive=True))
        if not files:
            raise FileNotFoundError(f"data.text: no files match '{text}'")
        documents = (Path(path).read_bytes() for path in files)
    chunks, size = [], 0
    for data in documents:
        chunks.append(data[: max_bytes - size])
        size += len(chunks[-1])
        if size >= max_bytes:
            break
    return torch.frombuffer(bytearray(b"".join(chunks)), dtype=torch.uint8)


def _docstrings(path: str) -> bytes:
    """Every docstring of a module (its own, its classes' and functions'), dedented."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return b""
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docs = [ast.get_docstring(node) for node in ast.walk(tree) if isinstance(node, kinds)]
    return "".join(doc + "\n\n" for doc in docs if doc).encode()


def _stdlib_files():
    # Sorted, so that every machine with the same Python builds the same corpus.
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(str(p) for p in root.glob("*.py"))


def split(corpus: torch.Tensor, eval_fraction: float):
    """(train, eval): the last ``eval_fraction`` of the corpus is held out."""
    cut = int(len(corpus) * (1 - eval_fraction))
    return corpus[:cut], corpus[cut:]


def batch(tokens: torch.Tensor, seq_len: int, batch_size: int, seed: int) -> torch.Tensor:
    """``batch_size`` windows of ``seq_len`` tokens at positions drawn from ``seed``; int64 ids."""
    if len(tokens) <= seq_len:
        raise ValueError(f"the text has {len(tokens)} tokens, fewer than data.seq_len={seq_len} + 1")
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(tokens) - seq_len, (batch_size,), generator=g)
    return torch.stack([tokens[s : s + seq_len] for s in starts.tolist()]).long()


def batch_seed(seed: int, step: int, micro: int = 0, rank: int = 0) -> int:
    return hash((seed, step, micro, rank)) & 0x7FFF_FFFF_FFFF


def encode(text: str) -> torch.Tensor:
    return torch.tensor(list(text.encode()), dtype=torch.long)


def decode(ids) -> str:
    return bytes(int(i) for i in ids).decode(errors="replace")
