"""Local stand-ins for TorchTitan's test assets, which its wheel does not ship: a byte-level BPE
tokenizer trained with the `tokenizers` package, and a JSON-lines dataset with a "text" field
(the format of TorchTitan's c4_test), both from the English of the Python standard library's
docstrings. Nothing is downloaded.

    python examples/torchtitan/make_assets.py DIR   # writes DIR/tokenizer and DIR/dataset
"""

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from torchtpu.train import corpus

VOCAB_SIZE = 2000  # inside llama3_debugmodel's vocabulary of 2048
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]


def documents(max_bytes: int = 2_000_000, size: int = 2000) -> list:
    """Docstring paragraphs grouped into documents of about `size` characters."""
    text = bytes(corpus.read_corpus("python-docstrings", max_bytes).tolist()).decode("utf-8", "ignore")
    docs, current = [], ""
    for paragraph in text.split("\n\n"):
        current += paragraph + "\n\n"
        if len(current) >= size:
            docs.append(current.strip())
            current = ""
    return docs


def write_tokenizer(folder: Path, docs: list) -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(docs, trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"bos_token": SPECIALS[0], "eos_token": SPECIALS[1], "add_bos_token": True, "add_eos_token": True}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def write_dataset(folder: Path, docs: list) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "data.json", "w") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}) + "\n")


def main(root: str) -> None:
    docs = documents()
    write_tokenizer(Path(root) / "tokenizer", docs)
    write_dataset(Path(root) / "dataset", docs)
    print(f"{len(docs)} documents; tokenizer and dataset in {root}")


if __name__ == "__main__":
    main(sys.argv[1])
