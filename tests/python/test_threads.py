"""Several Python threads dispatching to tpu at once (the data-loader pattern), with autograd's own
worker thread running their backward passes, give the same results as one thread."""

import threading

import pytest
import torch

import torchtpu


@pytest.mark.parametrize("mode", ["strict", "fused", "lazy"])
def test_threads_get_the_results_one_thread_gets(mode):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to("tpu")
    inputs = [torch.randn(8, 16) for _ in range(6)]
    with torchtpu.eager_mode(mode):
        expected = [model(x.to("tpu")).detach().cpu() for x in inputs]
        results, errors = [None] * len(inputs), []

        def work(i):
            try:
                for _ in range(10):
                    y = model(inputs[i].to("tpu"))
                    y.square().sum().backward()  # autograd's worker thread records too
                    results[i] = y.detach().cpu()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    for got, want in zip(results, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
