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


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_logging_thread_reading_item_while_the_main_thread_trains(mode):
    """The common pattern: the training loop on the main thread, a monitor thread calling .item() on
    the latest loss. The losses must be the single-threaded ones."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1).to("tpu")
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(32, 8).to("tpu"), torch.randn(32, 1).to("tpu")

    def train(steps, on_step=lambda loss: None):
        model.load_state_dict(initial)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            on_step(loss)
            losses.append(loss.detach())
        return [v.item() for v in losses]

    with torchtpu.eager_mode(mode):
        expected = train(30)
        latest, seen, stop = [None], [], threading.Event()

        def monitor():
            while not stop.is_set():
                if latest[0] is not None:
                    seen.append(latest[0].item())

        logger = threading.Thread(target=monitor)
        logger.start()
        try:
            got = train(30, lambda loss: latest.__setitem__(0, loss.detach()))
        finally:
            stop.set()
            logger.join()
    assert got == expected
    assert seen and set(seen) <= set(expected)
