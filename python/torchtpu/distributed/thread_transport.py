"""Collectives of ranks that are threads of one process, each rank on its own device.

Every collective is a rendezvous: each rank posts its contribution; the last to arrive runs one
compiled XLA collective over all the ranks' devices (``_C._collective``) and hands each rank its
result. A rank that calls a different collective, or never arrives within the timeout, or whose
thread died, makes the others raise instead of waiting forever.
"""

import threading
import time

import torch

from .. import _C


class _Slot:
    def __init__(self):
        self.posts = {}  # rank -> (name, payload)
        self.results = None
        self.error = None  # why it failed, for every rank
        self.taken = 0


class Rendezvous:
    """The meeting point of one group's ranks (or of one sender/receiver pair)."""

    _all = {}
    _all_lock = threading.Lock()
    _failed = {}  # global rank -> description, for ranks whose thread died

    @classmethod
    def of(cls, key, size):
        with cls._all_lock:
            if key not in cls._all:
                cls._all[key] = cls(size)
            return cls._all[key]

    @classmethod
    def rank_failed(cls, rank, description):
        """Wakes every waiter: a peer thread died, so its collectives can never complete."""
        with cls._all_lock:
            cls._failed[rank] = description
            meetings = list(cls._all.values())
        for m in meetings:
            with m.cv:
                m.cv.notify_all()

    @classmethod
    def reset(cls):
        with cls._all_lock:
            cls._all.clear()
            cls._failed.clear()

    def __init__(self, size):
        self.size = size
        self.cv = threading.Condition()
        self.slots = {}

    def meet(self, seq, rank, name, payload, combine, where):
        """Posts ``payload``; returns ``combine(payloads by rank)[rank]`` once every rank posted."""
        with self.cv:
            slot = self.slots.setdefault(seq, _Slot())
            slot.posts[rank] = (name, payload)
            if len(slot.posts) == self.size:
                self._complete(slot, combine)
                self.cv.notify_all()
            deadline = time.monotonic() + where.timeout.total_seconds()
            while slot.results is None and slot.error is None:
                if Rendezvous._failed:
                    slot.error = (f"rank {', '.join(map(str, Rendezvous._failed))} failed "
                                  f"({'; '.join(Rendezvous._failed.values())}), so it cannot complete")
                    self.cv.notify_all()
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(self.size)) - set(slot.posts))
                    slot.error = (f"timed out after {where.timeout.total_seconds():g} s waiting for "
                                  f"rank(s) {missing} of the group to join")
                    self.cv.notify_all()
                    break
                self.cv.wait(min(left, 1.0))
            slot.taken += 1
            if slot.taken == len(slot.posts):
                del self.slots[seq]
            if slot.error is not None:
                raise where.error(slot.error)  # each rank names its own call
            return slot.results[rank]

    def _complete(self, slot, combine):
        names = {name for name, _ in slot.posts.values()}
        if len(names) > 1:
            calls = ", ".join(f"rank {r}: {n}" for r, (n, _) in sorted(slot.posts.items()))
            slot.error = f"ranks called different collectives ({calls})"
            return
        try:
            slot.results = combine([slot.posts[r][1] for r in range(self.size)])
        except Exception as e:  # every rank raises it
            slot.error = str(e)


def _flat(tensors, device):
    if not tensors:
        return torch.empty(0, device=device)
    return torch.cat([t.detach().reshape(-1).to(device) for t in tensors])


def _write(tensors, flat):
    """Copies consecutive pieces of ``flat`` into ``tensors``."""
    at = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[at:at + n].view(t.shape))
            at += n


def _run(kind, flats, what, reduce="sum", pairs=()):
    return _C._collective(kind, reduce, flats, list(pairs), what)


_BITWISE = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}


def _all_reduce(flats, what, op):
    """all_reduce of flat tensors; ``avg`` divides the sum. XLA's CPU runtime has no bitwise
    reductions, so those gather every rank's values and fold them on each device."""
    if op in _BITWISE:
        n = flats[0].numel()
        gathered = _run("all_gather", flats, what)
        out = []
        for g in gathered:
            acc = g[:n]
            for r in range(1, len(flats)):
                acc = _BITWISE[op](acc, g[r * n:(r + 1) * n])
            out.append(acc)
        return out
    out = _run("all_reduce", flats, what, "sum" if op == "avg" else op)
    return [o / len(flats) for o in out] if op == "avg" else out


def _exchange(chunks_by_rank, what):
    """All-to-all of flat chunks of any sizes: chunks_by_rank[r][j] goes from rank r to rank j.
    Chunks are padded to the largest one so the exchange is one XLA all_to_all."""
    size = len(chunks_by_rank)
    longest = max(1, max(c.numel() for chunks in chunks_by_rank for c in chunks))
    padded = []
    for chunks in chunks_by_rank:
        device = chunks[0].device
        padded.append(torch.cat([torch.nn.functional.pad(c.to(device), (0, longest - c.numel())) for c in chunks]))
    received = _run("all_to_all", padded, what)
    return [[received[j][r * longest:r * longest + chunks_by_rank[r][j].numel()] for r in range(size)]
            for j in range(size)]


class ThreadTransport:
    def __init__(self, group_key, rank, size):
        self.rank, self.size = rank, size
        self.group = Rendezvous.of(("group", group_key), size)
        self.group_key = group_key
        self.seq = 0
        self.pair_seq = {}
        self.device = torch.device("tpu", torch.tpu.current_device())

    def _meet(self, where, payload, combine):
        self.seq += 1
        return self.group.meet(self.seq, self.rank, where.name, payload, combine, where)

    def _flat(self, tensors):
        return _flat(tensors, self.device)

    def allreduce(self, tensors, op, where):
        _write(tensors, self._meet(where, self._flat(tensors), lambda flats: _all_reduce(flats, where.name, op)))

    def broadcast(self, tensors, src, where):
        flat = self._flat(tensors)
        n = flat.numel()
        out = self._meet(where, flat, lambda flats: _run("all_gather", flats, where.name))
        _write(tensors, out[src * n:(src + 1) * n])

    def reduce(self, tensors, op, dst, where):
        out = self._meet(where, self._flat(tensors), lambda flats: _all_reduce(flats, where.name, op))
        if self.rank == dst:
            _write(tensors, out)

    def allgather(self, output_lists, inputs, where):
        flat = self._flat(inputs)
        n = flat.numel()
        out = self._meet(where, flat, lambda flats: _run("all_gather", flats, where.name))
        for r in range(self.size):
            _write([ts[r] for ts in output_lists], out[r * n:(r + 1) * n])

    def allgather_base(self, output, input, where):
        out = self._meet(where, self._flat([input]), lambda flats: _run("all_gather", flats, where.name))
        _write([output], out)

    def reduce_scatter(self, outputs, input_lists, op, where):
        # Rank-major: the chunk for rank r is every output's piece r, so XLA's chunk r goes to rank r.
        flat = self._flat([ts[r] for r in range(self.size) for ts in input_lists])
        self._reduce_scatter(outputs, flat, op, where)

    def reduce_scatter_base(self, output, input, op, where):
        self._reduce_scatter([output], self._flat([input]), op, where)

    def _reduce_scatter(self, outputs, flat, op, where):
        reduce = "sum" if op == "avg" else op
        out = self._meet(where, flat, lambda flats: _run("reduce_scatter", flats, where.name, reduce))
        _write(outputs, out / self.size if op == "avg" else out)

    def alltoall_base(self, output, input, output_splits, input_splits, where):
        rows = input.shape[0] if input.dim() else 1
        row = input.numel() // rows if rows else 0
        splits = input_splits or [rows // self.size] * self.size
        flat = self._flat([input])
        chunks, at = [], 0
        for s in splits:
            chunks.append(flat[at:at + s * row])
            at += s * row
        received = self._meet(where, chunks, lambda all_chunks: _exchange(all_chunks, where.name))
        _write([output], torch.cat(received))

    def alltoall(self, outputs, inputs, where):
        chunks = [self._flat([t]) for t in inputs]
        received = self._meet(where, chunks, lambda all_chunks: _exchange(all_chunks, where.name))
        for t, piece in zip(outputs, received):
            _write([t], piece)

    def gather(self, output_lists, inputs, dst, where):
        flat = self._flat(inputs)
        n = flat.numel()
        out = self._meet(where, flat, lambda flats: _run("all_gather", flats, where.name))
        if self.rank == dst:
            for r in range(self.size):
                _write([ts[r] for ts in output_lists], out[r * n:(r + 1) * n])

    def scatter(self, outputs, input_lists, src, where):
        empty = torch.empty(0, device=self.device)
        chunks = ([self._flat([ts[r] for ts in input_lists]) for r in range(self.size)] if self.rank == src
                  else [empty] * self.size)
        received = self._meet(where, chunks, lambda all_chunks: _exchange(all_chunks, where.name))
        _write(outputs, received[src])

    def send(self, tensors, dst, tag, where):
        self._pair(where, dst, tag, sending=True, flat=self._flat(tensors))

    def recv(self, tensors, src, tag, where):
        out = self._pair(where, src, tag, sending=False, flat=torch.zeros_like(self._flat(tensors)))
        _write(tensors, out)

    def _pair(self, where, peer, tag, sending, flat):
        """A send meets the matching recv (same pair, tag and count): one collective_permute."""
        src, dst = (self.rank, peer) if sending else (peer, self.rank)
        key = (src, dst, tag)
        self.pair_seq[key] = self.pair_seq.get(key, 0) + 1
        meeting = Rendezvous.of(("pair", self.group_key, key), 2)
        def combine(flats):  # flats[0]: the sender's (its rank is the lower index below)
            return _run("permute", flats, where.name, pairs=[(0, 1)])
        side = 0 if sending else 1
        return meeting.meet(self.pair_seq[key], side, "send/recv", flat, combine, where)

    def barrier(self, where):
        self._meet(where, None, lambda posts: [None] * self.size)

    def shutdown(self):
        pass
