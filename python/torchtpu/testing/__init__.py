"""Testing tools: the conformance harness over PyTorch's OpInfo database (torchtpu.testing.opinfo)."""
