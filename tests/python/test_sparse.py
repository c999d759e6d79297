"""Sparse COO tensors on tpu (issue "Correct everywhere": nn.Embedding(sparse=True) failed, as did
to_sparse). Every result is compared with CPU PyTorch's, and nothing may fall back to the CPU."""

import os

import pytest
import torch
import torch.nn as nn
import torchgen
import yaml

import torchtpu

pytestmark = [pytest.mark.filterwarnings("ignore:Sparse invariant checks"),
              pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")]  # CPU's sparse @ sparse


def assert_same_sparse(tpu, cpu):
    """Same shape, split, coalesced flag, and entries (indices and values, in order)."""
    assert tpu.device.type == "tpu" and tpu.layout == torch.sparse_coo
    assert (tpu.shape, tpu.sparse_dim(), tpu.dense_dim()) == (cpu.shape, cpu.sparse_dim(), cpu.dense_dim())
    assert tpu.is_coalesced() == cpu.is_coalesced()
    back = tpu.cpu()
    torch.testing.assert_close(back._indices(), cpu._indices(), rtol=0, atol=0)
    torch.testing.assert_close(back._values(), cpu._values())


def duplicated(dense_sizes=()):
    """An uncoalesced [4, 3, *dense_sizes] tensor: entries out of order, (1, 0) and (0, 2) twice."""
    g = torch.Generator().manual_seed(0)
    indices = torch.tensor([[0, 1, 1, 3, 0, 2], [2, 0, 0, 1, 2, 2]])
    return torch.sparse_coo_tensor(indices, torch.randn(6, *dense_sizes, generator=g), (4, 3, *dense_sizes))


@pytest.mark.parametrize("dense_sizes", [(), (2,)], ids=["plain", "hybrid"])
def test_coalesce_to_dense_and_back(dense_sizes, no_fallbacks):
    cpu = duplicated(dense_sizes)
    tpu = cpu.to("tpu")
    assert_same_sparse(tpu, cpu)
    assert_same_sparse(tpu.coalesce(), cpu.coalesce())
    torch.testing.assert_close(tpu.to_dense().cpu(), cpu.to_dense())
    dense = cpu.to_dense()
    for sparse_dim in range(1, dense.dim() + 1):
        assert_same_sparse(dense.to("tpu").to_sparse(sparse_dim), dense.to_sparse(sparse_dim))
    assert_same_sparse(dense.to("tpu").to_sparse(), dense.to_sparse())


def test_arithmetic_matches_cpu(no_fallbacks):
    cpu = duplicated()
    tpu = cpu.to("tpu")
    dense = torch.randn(4, 3)
    torch.testing.assert_close((dense.to("tpu") + tpu).cpu(), dense + cpu)
    torch.testing.assert_close(dense.to("tpu").add(tpu, alpha=-0.5).cpu(), dense.add(cpu, alpha=-0.5))
    in_place = dense.to("tpu")
    in_place.add_(tpu, alpha=2)
    torch.testing.assert_close(in_place.cpu(), dense.add(cpu, alpha=2))
    # Uncoalesced sums stay uncoalesced; their entries may be listed differently (CPU merges the
    # two lists in step), the tensor they stand for is the same.
    other = torch.sparse_coo_tensor(torch.tensor([[3, 0, 3], [1, 1, 1]]), torch.randn(3), (4, 3))
    tpu_sum, cpu_sum = tpu + other.to("tpu"), cpu + other
    assert not tpu_sum.is_coalesced() and not cpu_sum.is_coalesced()
    assert_same_sparse(tpu_sum.coalesce(), cpu_sum.coalesce())
    assert_same_sparse((tpu + tpu).coalesce(), (cpu + cpu).coalesce())
    assert_same_sparse(tpu.coalesce() + tpu.coalesce(), cpu.coalesce() + cpu.coalesce())  # CPU merges
    assert_same_sparse((tpu * 3).coalesce(), (cpu * 3).coalesce())
    assert_same_sparse((tpu / 4).coalesce(), (cpu / 4).coalesce())
    assert_same_sparse(dense.to("tpu").sparse_mask(tpu.coalesce()), dense.sparse_mask(cpu.coalesce()))
    right = torch.randn(3, 5)
    torch.testing.assert_close(torch.sparse.mm(tpu, right.to("tpu")).cpu(), torch.sparse.mm(cpu, right))
    bias = torch.randn(4, 5)
    torch.testing.assert_close(torch.addmm(bias.to("tpu"), tpu, right.to("tpu"), beta=0.5, alpha=2).cpu(),
                               torch.addmm(bias, cpu, right, beta=0.5, alpha=2))


def sparse_kernels_of_pytorch():
    """{op: (SparseCPU kernel, SparseCUDA kernel)} from the native_functions.yaml torch ships."""
    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged/ATen/native/native_functions.yaml")
    with open(path) as f:
        functions = yaml.load(f, Loader=yaml.CSafeLoader)
    kernels = {}
    for fn in functions:
        by_key = {key.strip(): kernel for keys, kernel in (fn.get("dispatch") or {}).items() for key in keys.split(",")}
        if "SparseCPU" in by_key or "SparseCUDA" in by_key:
            kernels[fn["func"].split("(")[0]] = (by_key.get("SparseCPU"), by_key.get("SparseCUDA"))
    return kernels


def test_every_device_generic_sparse_kernel_is_registered():
    """A sparse op whose CPU and CUDA kernel is one function is device-generic: tpu must run it too
    (aten/ops/sparse.cpp lists them). Per-device ones are written for tpu where training needs them."""
    kernels = sparse_kernels_of_pytorch()
    generic = [op for op, (cpu, cuda) in kernels.items() if cpu is not None and cpu == cuda]
    assert len(generic) > 100
    per_device = ["_coalesce", "add.out", "mul.out", "addmm", "bmm", "index_select", "_sparse_softmax",
                  "_sparse_log_softmax", "_sparse_softmax_backward_data", "_sparse_log_softmax_backward_data",
                  "_sparse_sum_backward", "_sparse_sparse_matmul"]
    assert all(kernels[op][0] != kernels[op][1] for op in per_device)
    missing = [op for op in generic + per_device
               if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::" + op, "SparsePrivateUse1")]
    assert missing == []


@pytest.mark.parametrize("op", [
    torch.neg, torch.abs, torch.sqrt, torch.sin, torch.tanh, torch.expm1, torch.log1p, torch.floor, torch.sign,
    torch.relu, torch.isnan, lambda x: x.pow(2), lambda x: x.sum(), lambda x: torch.sparse.sum(x, 1),
    lambda x: x.norm(), lambda x: x - x.coalesce() * 2, lambda x: x * torch.arange(12.0).view(4, 3).to(x.device),
    lambda x: x.coalesce() * x.coalesce(), lambda x: x / 4, lambda x: x.t(), lambda x: x.unsqueeze(1),
    lambda x: x.narrow_copy(0, 1, 2), lambda x: torch.cat([x, x], 1), lambda x: torch.mv(x, torch.arange(3.0).to(x.device)),
    lambda x: torch.sparse.mm(torch.arange(8.0).view(2, 4).to(x.device), x),
], ids=lambda op: getattr(op, "__name__", None))
def test_ops_match_cpu(op, no_fallbacks):
    cpu = duplicated()
    cpu = torch.sparse_coo_tensor(cpu._indices(), cpu._values().abs(), cpu.shape)  # sqrt's domain
    expected, got = op(cpu), op(cpu.to("tpu"))
    assert got.device.type == "tpu" and got.layout == expected.layout
    if expected.is_sparse:
        expected, got = expected.to_dense(), got.to_dense()
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("ord", [2, 1, float("inf"), 0, 3.5])
def test_vector_norm_as_cpu(ord, no_fallbacks):
    """torch.linalg.vector_norm of a sparse tensor, a device-generic kernel since PyTorch #185309
    (after 2.11, which has no sparse kernel for it on any device)."""
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::linalg_vector_norm", "SparseCPU"):
        pytest.skip("this PyTorch has no sparse linalg_vector_norm")
    cpu = duplicated()
    torch.testing.assert_close(torch.linalg.vector_norm(cpu.to("tpu"), ord).cpu(), torch.linalg.vector_norm(cpu, ord))


def test_empty_and_all_zero(no_fallbacks):
    zeros = torch.zeros(3, 4)
    assert_same_sparse(zeros.to("tpu").to_sparse(), zeros.to_sparse())
    empty = torch.sparse_coo_tensor(torch.empty(2, 0, dtype=torch.long), torch.empty(0), (3, 4))
    assert_same_sparse(empty.to("tpu").coalesce(), empty.coalesce())
    torch.testing.assert_close(empty.to("tpu").to_dense().cpu(), zeros)


def test_errors_are_cpus():
    tpu = duplicated().to("tpu")
    with pytest.raises(RuntimeError, match=r"add\(sparse, dense\) is not supported"):
        tpu + torch.ones(4, 3, device="tpu")
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        torch.sparse.mm(tpu, torch.ones(4, 2, device="tpu"))
    with pytest.raises(RuntimeError, match="only the sparse COO layout"):
        torch.ones(2, 2, device="tpu").to_sparse(layout=torch.sparse_csr)
    for convert in (lambda t: t.to_sparse_csr(), lambda t: t.to_sparse_csc(), lambda t: t.to_sparse_bsr(1)):
        for source in (torch.ones(2, 2, device="tpu"), tpu.coalesce()):
            with pytest.raises(NotImplementedError, match="no compressed sparse layouts"):
                convert(source)


def embedding_step_weights(device, optimizer, bag, steps=3):
    torch.manual_seed(0)
    emb = (nn.EmbeddingBag(20, 4, mode="mean", sparse=True) if bag
           else nn.Embedding(20, 4, padding_idx=1, sparse=True)).to(device)
    head = nn.Linear(4, 1).to(device)
    opt = optimizer(emb.parameters())
    head_opt = torch.optim.SGD(head.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        idx = torch.randint(0, 20, (6, 5), generator=g).to(device)
        opt.zero_grad()
        head_opt.zero_grad()
        head(emb(idx)).pow(2).mean().backward()
        assert emb.weight.grad.is_sparse
        opt.step()
        head_opt.step()
    return emb.weight.detach().cpu()


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.5),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.5),
    "sparse_adam": lambda p: torch.optim.SparseAdam(p, lr=0.1),
}


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy"])
@pytest.mark.parametrize("bag", [False, True], ids=["embedding", "embedding_bag"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_sparse_embedding_trains_like_cpu(optimizer, bag, mode, no_fallbacks):
    expected = embedding_step_weights("cpu", OPTIMIZERS[optimizer], bag)
    with torchtpu.eager_mode(mode):
        got = embedding_step_weights("tpu", OPTIMIZERS[optimizer], bag)
    torch.testing.assert_close(got, expected)


def test_sparse_gradients_accumulate_like_cpu(no_fallbacks):
    """Two backwards without zero_grad: AccumulateGrad adds sparse to sparse (uncoalesced)."""
    grads = {}
    for device in ("cpu", "tpu"):
        torch.manual_seed(0)
        emb = nn.Embedding(10, 3, sparse=True).to(device)
        for idx in ([1, 2, 2], [2, 7]):
            emb(torch.tensor(idx, device=device)).sum().backward()
        grads[device] = emb.weight.grad
    assert_same_sparse(grads["tpu"], grads["cpu"])
    assert_same_sparse(grads["tpu"].coalesce(), grads["cpu"].coalesce())


GRAPH_EDGES = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 2, 1], [1, 2, 3, 4, 5, 0, 3, 5, 2]])


@pytest.mark.parametrize("loss", [
    lambda adj, x: torch.sparse.mm(adj, torch.sparse.mm(adj, x).tanh()).pow(2).sum(),
    lambda adj, x: torch.sparse.sum(adj * adj) * x.sum(),
    lambda adj, x: (adj.to_dense() @ x).pow(2).sum(),
    lambda adj, x: adj.coalesce().values().pow(2).sum() + x.sum(),
], ids=["two_layer_gcn", "sparse_sum", "to_dense", "values"])
def test_gradients_through_sparse_constructions_as_cpu(loss, no_fallbacks):
    """A graph network's learned edge weights: autograd projects the gradient onto the sparse
    input (_sparse_mask_projection, sparse_mask of a sparse tensor), which raised PyTorch's
    "DispatchStub: missing kernel for tpu" internal assert."""
    grads = {}
    for device in ("cpu", "tpu"):
        g = torch.Generator().manual_seed(0)
        weights = torch.rand(9, generator=g).to(device).requires_grad_()
        features = torch.randn(6, 4, generator=g).to(device).requires_grad_()
        adjacency = torch.sparse_coo_tensor(GRAPH_EDGES.to(device), weights, (6, 6))
        loss(adjacency, features).backward()
        grads[device] = (weights.grad.cpu(), features.grad.cpu())
    torch.testing.assert_close(grads["tpu"], grads["cpu"])


def test_sparse_mask_and_projection_of_sparse_tensors_as_cpu(no_fallbacks):
    self = duplicated()
    mask = torch.sparse_coo_tensor(torch.tensor([[1, 0, 2, 1], [0, 2, 2, 0]]), torch.ones(4), (4, 3))
    for m in (mask, mask.coalesce()):
        assert_same_sparse(self.to("tpu").sparse_mask(m.to("tpu")), self.sparse_mask(m))
        for accumulate in (False, True):
            expected = torch.ops.aten._sparse_mask_projection(self, m, accumulate)
            assert_same_sparse(torch.ops.aten._sparse_mask_projection(self.to("tpu"), m.to("tpu"), accumulate), expected)


def test_index_select_as_cpu(no_fallbacks):
    """Sparse index_select (mini-batching a graph's adjacency, a table's rows): CPU's entries in
    CPU's order, and its coalesced flag."""
    hybrid = torch.sparse_coo_tensor(torch.tensor([[0, 1, 3]]), torch.arange(6.0).view(3, 2), (4, 2))
    for self in (duplicated(), duplicated().coalesce(), hybrid, hybrid.coalesce()):
        for dim, index in ((0, [1, 0, 1]), (0, [0, 2, 3]), (0, [3]), (1, [2, 2, 0]), (-1, [1]), (0, [])):
            index = torch.tensor(index, dtype=torch.long).clamp(max=self.shape[dim] - 1)
            assert_same_sparse(self.to("tpu").index_select(dim, index.to("tpu")), self.index_select(dim, index))
    with pytest.raises(IndexError, match="index contains 5 that is out of range"):
        duplicated().to("tpu").index_select(0, torch.tensor([5], device="tpu"))


@pytest.mark.parametrize("softmax", [torch.sparse.softmax, torch.sparse.log_softmax], ids=["softmax", "log_softmax"])
def test_sparse_softmax_and_its_gradient_as_cpu(softmax, no_fallbacks):
    """Softmax over the specified entries (attention over a sparse adjacency), along a sparse and
    a dense dimension, and its backward."""
    g = torch.Generator().manual_seed(0)
    plain = torch.sparse_coo_tensor(torch.tensor([[0, 1, 1, 3, 0, 2, 3], [2, 0, 1, 1, 0, 2, 0]]),
                                    torch.randn(7, generator=g), (4, 3))
    hybrid = torch.sparse_coo_tensor(torch.tensor([[0, 1, 3, 2]]), torch.randn(4, 3, generator=g), (4, 3))
    for x in (plain, hybrid):
        for dim in (0, 1):
            results = {}
            for device in ("cpu", "tpu"):
                leaf = x.clone().to(device).coalesce().requires_grad_()
                y = softmax(leaf, dim)
                (y.to_dense() * torch.arange(12.0).view(4, 3).to(device)).sum().backward()
                results[device] = (y.cpu().to_dense(), leaf.grad.cpu().to_dense())
            torch.testing.assert_close(results["tpu"], results["cpu"])


def test_sparse_bmm_and_its_gradient_as_cpu(no_fallbacks):
    g = torch.Generator().manual_seed(3)
    indices = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 2, 0, 2, 2, 0], [3, 0, 1, 1, 1, 2]])
    batch = torch.sparse_coo_tensor(indices, torch.randn(6, generator=g), (2, 3, 4))
    right = torch.randn(2, 4, 5, generator=g)
    results = {}
    for device in ("cpu", "tpu"):
        leaf = right.clone().to(device).requires_grad_()
        product = torch.bmm(batch.to(device), leaf)
        product.pow(2).sum().backward()
        results[device] = (product.cpu(), leaf.grad.cpu())
    torch.testing.assert_close(results["tpu"], results["cpu"])


@pytest.mark.parametrize("dims", [[0], [2], [1, 2], [0, 1], [0, 1, 2]], ids=str)
def test_gradient_of_sparse_sum_as_cpu(dims, no_fallbacks):
    """torch.sparse.sum over sparse and dense dimensions of a hybrid tensor with duplicate
    entries, back to the values it was built from."""
    indices = torch.tensor([[0, 1, 3, 1], [1, 0, 2, 0]])
    values = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    grads = {}
    for device in ("cpu", "tpu"):
        leaf = values.clone().to(device).requires_grad_()
        total = torch.sparse.sum(torch.sparse_coo_tensor(indices.to(device), leaf, (4, 3, 3)), dims)
        total = total.to_dense() if total.is_sparse else total
        (total * torch.arange(float(total.numel())).view(total.shape).to(device)).sum().backward()
        grads[device] = leaf.grad.cpu()
    torch.testing.assert_close(grads["tpu"], grads["cpu"])


def test_sparse_times_sparse_and_its_gradient_as_cpu(no_fallbacks):
    """A @ B of two sparse matrices (two-hop neighbourhoods): CPU's coalesced entries, and the
    gradients of both value vectors."""
    g = torch.Generator().manual_seed(0)
    a_indices = torch.tensor([[0, 1, 1, 3, 0, 2, 1], [2, 0, 3, 1, 2, 2, 0]])
    b_indices = torch.tensor([[0, 2, 3, 2, 1], [1, 0, 2, 2, 1]])
    a_values, b_values = torch.randn(7, generator=g), torch.randn(5, generator=g)
    results = {}
    for device in ("cpu", "tpu"):
        va, vb = a_values.clone().to(device).requires_grad_(), b_values.clone().to(device).requires_grad_()
        a = torch.sparse_coo_tensor(a_indices.to(device), va, (4, 4))
        b = torch.sparse_coo_tensor(b_indices.to(device), vb, (4, 3))
        product = torch.sparse.mm(a, b)
        (product.to_dense() * torch.arange(12.0).view(4, 3).to(device)).sum().backward()
        results[device] = (product, va.grad.cpu(), vb.grad.cpu())
    assert_same_sparse(results["tpu"][0].detach(), results["cpu"][0].detach())
    torch.testing.assert_close(results["tpu"][1:], results["cpu"][1:])
