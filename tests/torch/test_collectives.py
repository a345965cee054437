"""Every c10d operation torch routes to a CPU backend, through torch.distributed on "tutti",
against the same call on torch's own "gloo" in the same processes (a gloo group over the same
ranks): every dtype gloo takes on the CPU, every ReduceOp, exact equality on integer-valued
inputs. Where gloo refuses a call, tutti must refuse it too or give the exact reference result.

    python tests/torch/test_collectives.py        # world sizes 1-4 (TUTTI_TORCH_SIZES=2,3)
"""

import functools
import os
import operator
import warnings

import torch
import torch.distributed as dist

import harness
import tutti_torch

warnings.filterwarnings("ignore")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]
OPS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
LENGTHS = [1, 37, 70_000]  # one element, an odd count, several chunks of every schedule


def values(dtype, n, rank, salt=0):
    """Integer-valued data in 1..3 (bool: alternating), different on every rank."""
    i = torch.arange(n, dtype=torch.int64) + rank + salt
    if dtype == torch.bool:
        return (i % 2) == 0
    return (i % 3 + 1).to(dtype)


def reference(op, inputs, size):
    """What op over every rank's input gives, computed here (float64 / int64 / bool)."""
    dtype = inputs[0].dtype
    if op == "AVG" and dtype == torch.bool:
        raise ValueError("AVG is not defined on bool")
    if op in ("BAND", "BOR", "BXOR") and dtype.is_floating_point:
        raise ValueError("bitwise ops are not defined on floating types")
    wide = [t.to(torch.int64) if not t.is_floating_point() else t.to(torch.float64)
            for t in inputs]
    if op == "SUM":
        r = sum(wide)
    elif op == "AVG":
        r = sum(wide) // size if not dtype.is_floating_point else sum(wide) / size
    elif op == "PRODUCT":
        r = functools.reduce(operator.mul, wide)
    elif op == "MIN":
        r = functools.reduce(torch.minimum, wide)
    elif op == "MAX":
        r = functools.reduce(torch.maximum, wide)
    else:
        f = {"BAND": operator.and_, "BOR": operator.or_, "BXOR": operator.xor}[op]
        r = functools.reduce(f, wide)
    if dtype == torch.bool:
        return r != 0
    return r.to(dtype)


def outcome(fn):
    """fn()'s result, or the exception it raised."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001  (compared, not swallowed)
        return e


def same(a, b, what):
    if isinstance(a, list):
        harness.check(isinstance(b, list) and len(a) == len(b), f"{what}: lengths differ")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{what}[{i}]")
        return
    harness.check(a.dtype == b.dtype and a.shape == b.shape,
                  f"{what}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
    harness.check(torch.equal(a, b), f"{what}: tutti {a.flatten()[:8].tolist()} ... "
                  f"!= expected {b.flatten()[:8].tolist()} ...")


def compare(what, run, gloo, expected):
    """Runs `run(group)` on tutti (the default group) and on gloo. tutti must return `expected`
    (computed here), or raise where `expected` is an exception (the op is not defined on the
    dtype); where gloo takes the call, it must return the same."""
    t = outcome(lambda: run(None))
    g = outcome(lambda: run(gloo))
    if isinstance(expected, Exception):
        harness.check(isinstance(t, Exception), f"{what}: tutti returned, expected it to raise")
        return
    if isinstance(t, Exception):
        raise AssertionError(f"{what}: tutti raised {t!r}")
    same(t, expected, what)
    if not isinstance(g, Exception):
        same(t, g, what + " (tutti vs gloo)")


def reductions(rank, size, gloo):
    inputs = lambda dt, n: [values(dt, n, r) for r in range(size)]  # noqa: E731
    for dt in DTYPES:
        for op in OPS:
            rop = getattr(dist.ReduceOp, op)
            for n in LENGTHS:
                ref = outcome(lambda: reference(op, inputs(dt, n), size))

                def all_reduce(g):
                    t = values(dt, n, rank)
                    dist.all_reduce(t, rop, group=g)
                    return t
                compare(f"all_reduce {dt} {op} n={n}", all_reduce, gloo, ref)

            n = 37
            root = size - 1
            ref = outcome(lambda: reference(op, inputs(dt, n), size))

            def reduce(g):
                t = values(dt, n, rank)
                dist.reduce(t, root, rop, group=g)
                return t if rank == root else torch.zeros(0, dtype=dt)
            compare(f"reduce {dt} {op}", reduce, gloo,
                    ref if rank == root or isinstance(ref, Exception) else torch.zeros(0, dtype=dt))

            blocks = [values(dt, 5 * size, r) for r in range(size)]
            ref = outcome(lambda: reference(op, blocks, size))
            mine = ref if isinstance(ref, Exception) else ref[5 * rank:5 * rank + 5]

            def reduce_scatter_tensor(g):
                out = torch.zeros(5, dtype=dt)
                dist.reduce_scatter_tensor(out, values(dt, 5 * size, rank), rop, group=g)
                return out
            compare(f"reduce_scatter_tensor {dt} {op}", reduce_scatter_tensor, gloo, mine)

            def reduce_scatter(g):
                out = torch.zeros(5, dtype=dt)
                dist.reduce_scatter(out, list(values(dt, 5 * size, rank).chunk(size)), rop,
                                    group=g)
                return out
            compare(f"reduce_scatter {dt} {op}", reduce_scatter, gloo, mine)

        def coalesced(g):
            ts = [values(dt, 3, rank), values(dt, 11, rank, 1)]
            dist.all_reduce_coalesced(ts, dist.ReduceOp.MAX, group=g)
            return ts
        compare(f"all_reduce_coalesced {dt}", coalesced, gloo,
                [reference("MAX", [values(dt, 3, r) for r in range(size)], size),
                 reference("MAX", [values(dt, 11, r, 1) for r in range(size)], size)])


def data_movement(rank, size, gloo):
    for dt in DTYPES:
        broadcast_and_all_gathers(rank, size, gloo, dt)
        gather_and_scatter(rank, size, gloo, dt)
        all_to_alls(rank, size, gloo, dt)
    dist.barrier()
    dist.barrier(group=gloo)


def broadcast_and_all_gathers(rank, size, gloo, dt):
    for root in range(size):
        def broadcast(g):
            t = values(dt, 1000, rank, 7)
            dist.broadcast(t, root, group=g)
            return t
        compare(f"broadcast {dt} root {root}", broadcast, gloo, values(dt, 1000, root, 7))

    def all_gather(g):
        out = [torch.zeros(6, dtype=dt) for _ in range(size)]
        dist.all_gather(out, values(dt, 6, rank), group=g)
        return out
    compare(f"all_gather {dt}", all_gather, gloo, [values(dt, 6, r) for r in range(size)])

    def all_gather_into_tensor(g):
        out = torch.zeros(size * 6, dtype=dt)
        dist.all_gather_into_tensor(out, values(dt, 6, rank), group=g)
        return out
    compare(f"all_gather_into_tensor {dt}", all_gather_into_tensor, gloo,
            torch.cat([values(dt, 6, r) for r in range(size)]))

    def all_gather_coalesced(g):
        out = [[torch.zeros(2, dtype=dt), torch.zeros(3, dtype=dt)] for _ in range(size)]
        dist.all_gather_coalesced(out, [values(dt, 2, rank), values(dt, 3, rank, 1)],
                                  group=g)
        return [t for lst in out for t in lst]
    compare(f"all_gather_coalesced {dt}", all_gather_coalesced, gloo,
            [t for r in range(size) for t in (values(dt, 2, r), values(dt, 3, r, 1))])


def gather_and_scatter(rank, size, gloo, dt):
    root = size // 2

    def gather(g):
        out = [torch.zeros(4, dtype=dt) for _ in range(size)] if rank == root else None
        dist.gather(values(dt, 4, rank), out, dst=root, group=g)
        return out if rank == root else []
    compare(f"gather {dt}", gather, gloo,
            [values(dt, 4, r) for r in range(size)] if rank == root else [])

    def scatter(g):
        out = torch.zeros(4, dtype=dt)
        ins = [values(dt, 4, r, 2) for r in range(size)] if rank == root else None
        dist.scatter(out, ins, src=root, group=g)
        return out
    compare(f"scatter {dt}", scatter, gloo, values(dt, 4, rank, 2))


def all_to_alls(rank, size, gloo, dt):
    def all_to_all(g):
        # rank r sends r + j + 1 elements to rank j: every block a different size
        ins = [values(dt, rank + j + 1, rank, j) for j in range(size)]
        outs = [torch.zeros(j + rank + 1, dtype=dt) for j in range(size)]
        dist.all_to_all(outs, ins, group=g)
        return outs
    compare(f"all_to_all {dt}", all_to_all, gloo,
            [values(dt, j + rank + 1, j, rank) for j in range(size)])

    def all_to_all_single(g):
        out = torch.zeros(size * 3, 2, dtype=dt)
        dist.all_to_all_single(out, values(dt, size * 6, rank).view(size * 3, 2), group=g)
        return out
    compare(f"all_to_all_single {dt}", all_to_all_single, gloo,
            torch.cat([values(dt, size * 6, j).view(size * 3, 2)[3 * rank:3 * rank + 3]
                       for j in range(size)]))

    def all_to_all_single_splits(g):
        send = [rank + j + 1 for j in range(size)]  # rows to rank j
        recv = [j + rank + 1 for j in range(size)]  # rows from rank j
        out = torch.zeros(sum(recv), 2, dtype=dt)
        dist.all_to_all_single(out, values(dt, 2 * sum(send), rank).view(-1, 2), recv, send,
                               group=g)
        return out
    compare(f"all_to_all_single with splits {dt}", all_to_all_single_splits, gloo,
            torch.cat([values(dt, 2 * sum(j + k + 1 for k in range(size)), j).view(-1, 2)[
                sum(j + k + 1 for k in range(rank)):][:j + rank + 1] for j in range(size)]))


def point_to_point(rank, size, gloo):
    if size == 1:
        return
    right, left = (rank + 1) % size, (rank - 1) % size
    for dt in DTYPES:
        for g in (None, gloo):
            # Blocking ring, even ranks send first (odd ranks receive first).
            got = torch.zeros(9, dtype=dt)
            if rank % 2 == 0:
                dist.send(values(dt, 9, rank), right, group=g, tag=3)
                dist.recv(got, left, group=g, tag=3)
            else:
                dist.recv(got, left, group=g, tag=3)
                dist.send(values(dt, 9, rank), right, group=g, tag=3)
            same(got, values(dt, 9, left), f"send/recv ring {dt}")

            # Every rank posts its receive first, then its send: must not deadlock.
            a, b = torch.zeros(100_000, dtype=dt), torch.zeros(5, dtype=dt)
            reqs = [dist.irecv(a, left, group=g, tag=1), dist.irecv(b, right, group=g, tag=2),
                    dist.isend(values(dt, 100_000, rank), right, group=g, tag=1),
                    dist.isend(values(dt, 5, rank, 1), left, group=g, tag=2)]
            for r in reversed(reqs):
                r.wait()
            same(a, values(dt, 100_000, left), f"isend/irecv {dt}")
            same(b, values(dt, 5, right, 1), f"isend/irecv {dt} other way")

            # batch_isend_irecv both ways round the ring.
            x, y = torch.zeros(17, dtype=dt), torch.zeros(17, dtype=dt)
            ops = [dist.P2POp(dist.isend, values(dt, 17, rank), right, group=g),
                   dist.P2POp(dist.isend, values(dt, 17, rank, 1), left, group=g),
                   dist.P2POp(dist.irecv, x, left, group=g),
                   dist.P2POp(dist.irecv, y, right, group=g)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            same(x, values(dt, 17, left), f"batch_isend_irecv {dt}")
            same(y, values(dt, 17, right, 1), f"batch_isend_irecv {dt} other way")

    # recv without a source, as torch's own test does it: each rank in turn takes a message
    # from every other rank twice over (recv, then irecv), in whatever order they come.
    for g in (None, gloo):
        for receiver in range(size):
            if rank != receiver:
                for _ in range(2):
                    dist.send(torch.full((10,), float(rank)), receiver, group=g, tag=9)
                continue
            sources = []
            for _ in range(size - 1):
                z = torch.full((10,), -1.0)
                sources.append(dist.recv(z, group=g, tag=9))
                same(z, torch.full((10,), float(sources[-1])), "recv from any source")
                z = torch.full((10,), -1.0)
                w = dist.irecv(z, group=g, tag=9)
                w.wait()
                sources.append(w._source_rank())
                same(z, torch.full((10,), float(sources[-1])), "irecv from any source")
            harness.check(sorted(sources) == sorted([r for r in range(size) if r != rank] * 2),
                          f"recv from any source: sources {sources}")
    if size > 2:
        any_source_order(rank, size)


def any_source_order(rank, size):
    """Receives from any rank match as MPI's do: a message goes to the earliest-posted receive
    that wants it, and messages from one rank with one tag arrive in order. (tutti's promise;
    gloo's order differs.)"""
    if rank == 1:
        for v in (1.0, 2.0, 3.0):  # tag 5, in order
            dist.send(torch.full((3,), v), 0, tag=5)
        dist.send(torch.full((3,), 4.0), 0, tag=7)  # comes before tag 8
        dist.send(torch.full((70_000,), 5.0), 0, tag=8)
    elif rank == 2:
        dist.send(torch.full((3,), 6.0), 0, tag=6)
    elif rank == 0:
        a, b, c, d = (torch.zeros(3) for _ in range(4))
        works = [dist.irecv(a, tag=5), dist.irecv(b, 1, tag=5), dist.irecv(c, tag=6),
                 dist.irecv(d, tag=5)]
        for w in works:
            w.wait()
        harness.check([w._source_rank() for w in works] == [1, 1, 2, 1],
                      f"any-source order: sources {[w._source_rank() for w in works]}")
        same(torch.stack([a, b, c, d]), torch.tensor([1.0, 2.0, 6.0, 3.0]).repeat_interleave(3)
             .view(4, 3), "any-source order: earliest-posted receive first")
        # The tag-7 message comes first; a receive from rank 1 with tag 8 is posted first. (A
        # blocking receive of tag 8 first would wait for ever over Gloo, whose sends wait for
        # their receive: an unsafe program in MPI's terms.)
        big, late = torch.zeros(70_000), torch.zeros(3)
        w8, w7 = dist.irecv(big, 1, tag=8), dist.irecv(late, tag=7)
        w8.wait()
        w7.wait()
        harness.check(w7._source_rank() == 1, "any-source: a message that came first")
        same(late, torch.full((3,), 4.0), "any-source: a message that came first")
        same(big, torch.full((70_000,), 5.0), "any-source: the one after it")
    dist.barrier()


def objects(rank, size, gloo):
    state = {"layer.weight": torch.arange(6.0).view(2, 3) * (rank + 1), "step": rank}
    for g in (None, gloo):
        lst = [state, "two", 3] if rank == 0 else [None, None, None]
        dist.broadcast_object_list(lst, 0, group=g)
        harness.check(lst[1:] == ["two", 3] and lst[0]["step"] == 0 and
                      torch.equal(lst[0]["layer.weight"], torch.arange(6.0).view(2, 3)),
                      "broadcast_object_list")
        out = [None] * size
        dist.all_gather_object(out, {"rank": rank, "name": "r" * (rank + 1)}, group=g)
        harness.check(out == [{"rank": r, "name": "r" * (r + 1)} for r in range(size)],
                      f"all_gather_object: {out}")
        got = [None] * size if rank == 0 else None
        dist.gather_object(("x", rank), got, dst=0, group=g)
        harness.check(rank != 0 or got == [("x", r) for r in range(size)], "gather_object")
        mine = [None]
        dist.scatter_object_list(mine, [{"to": r} for r in range(size)] if rank == 0 else None,
                                 src=0, group=g)
        harness.check(mine == [{"to": rank}], f"scatter_object_list: {mine}")


def groups(rank, size, gloo):
    """new_group and new_subgroups: each group its own tutti world over its prefixed store."""
    evens = dist.new_group([r for r in range(size) if r % 2 == 0], backend="tutti")
    odds = dist.new_group([r for r in range(size) if r % 2 == 1], backend="tutti") if size > 1 \
        else None
    mine = evens if rank % 2 == 0 else odds
    t = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(t, group=mine)
    harness.check(t.item() == sum(r + 1 for r in range(size) if r % 2 == rank % 2),
                  f"all_reduce on new_group: {t.item()}")
    sub, _ = dist.new_subgroups(group_size=1 if size % 2 else min(2, size), backend="tutti")
    u = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(u, group=sub)
    step = 1 if size % 2 else min(2, size)
    first = rank - rank % step
    harness.check(u.item() == sum(range(first, first + step)),
                  f"all_reduce on new_subgroups: {u.item()}")
    # What each group runs over: shm on one (simulated) host, cluster across hosts where a
    # host has several of the group's ranks, else gloo (or what TUTTI_TORCH_TRANSPORT says).
    for what, g, ranks in (("world", None, range(size)),
                           ("new_group", mine, range(rank % 2, size, 2)),
                           ("new_subgroups", sub, range(first, first + step))):
        want = harness.expected_transport(list(ranks), size)
        harness.check(tutti_torch.transport(g) == want,
                      f"{what} runs over {tutti_torch.transport(g)}, not {want}")


def mesh(rank, size, gloo):
    """torch's DeviceMesh and DTensor over tutti, the shape tensor- and data-parallel code is
    written in: a (size/2) x 2 mesh ("dp", "tp"), its groups along each dimension, a tensor
    sharded along "tp" and gathered back, partial sums made whole, and a tensor-parallel MLP
    (parallelize_module) forward and backward. Even world sizes only."""
    if size % 2:
        return
    from torch.distributed.device_mesh import init_device_mesh

    m = init_device_mesh("cpu", (size // 2, 2), mesh_dim_names=("dp", "tp"))
    mesh_groups(m, rank, size)
    mesh_dtensors(m, rank)
    mesh_tensor_parallel(m, rank)


def mesh_groups(m, rank, size):
    """The mesh's coordinates, its groups along "dp" and "tp" (tutti's, over the expected
    transport) and an all_reduce along each."""
    dp, tp = divmod(rank, 2)
    harness.check(tuple(m.get_coordinate()) == (dp, tp), f"mesh coordinate: {m.get_coordinate()}")
    harness.check((m.get_local_rank("dp"), m.get_local_rank("tp")) == (dp, tp),
                  "mesh local ranks")
    harness.check(dist.get_backend(m.get_group("tp")) == "tutti", "the mesh's groups are tutti's")
    for dim, ranks in (("tp", [2 * dp, 2 * dp + 1]), ("dp", list(range(tp, size, 2)))):
        want = harness.expected_transport(ranks, size)
        harness.check(tutti_torch.transport(m.get_group(dim)) == want,
                      f"the mesh's {dim} group runs over {tutti_torch.transport(m.get_group(dim))}"
                      f", not {want}")
    t = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(t, group=m.get_group("tp"))  # ranks 2dp and 2dp + 1
    harness.check(t.item() == 4 * dp + 3, f"all_reduce along tp: {t.item()}")
    u = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(u, group=m.get_group("dp"))  # ranks tp, tp + 2, ...
    harness.check(u.item() == sum(2 * d + tp + 1 for d in range(size // 2)),
                  f"all_reduce along dp: {u.item()}")


def mesh_dtensors(m, rank):
    """A tensor sharded along "tp" and gathered back; partial sums made whole."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    dp, tp = divmod(rank, 2)
    full = torch.arange(8 * 3, dtype=torch.float32).view(8, 3) + 100 * dp
    d = distribute_tensor(full, m["tp"], [Shard(0)])
    harness.check(torch.equal(d.to_local(), full[4 * tp:4 * tp + 4]),
                  f"Shard(0) along tp: {d.to_local()}")
    harness.check(torch.equal(d.full_tensor(), full), "a sharded DTensor gathered back")
    p = DTensor.from_local(torch.full((5,), float(rank + 1)), m["tp"], [Partial()])
    whole = p.redistribute(m["tp"], [Replicate()]).to_local()
    harness.check(torch.equal(whole, torch.full((5,), float(4 * dp + 3))),
                  f"Partial made Replicate along tp: {whole}")


def mesh_tensor_parallel(m, rank):
    """Tensor parallelism as torch writes it: a column-wise then a row-wise Linear along "tp",
    forward and backward against the same model unsharded. Integer weights and inputs in
    float64 keep every sum exact, whatever order the shards add in."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    dp = rank // 2
    gen = torch.Generator().manual_seed(7)

    def mlp():
        net = torch.nn.Sequential(torch.nn.Linear(8, 16, dtype=torch.float64), torch.nn.ReLU(),
                                  torch.nn.Linear(16, 4, dtype=torch.float64))
        with torch.no_grad():
            for w in net.parameters():
                w.copy_(torch.randint(-3, 4, w.shape, generator=gen))
        return net

    ref = mlp()  # the same weights on every rank (the same seed)
    net = mlp()
    net.load_state_dict(ref.state_dict())
    parallelize_module(net, m["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = (torch.arange(3 * 8, dtype=torch.float64).view(3, 8) % 5) - 2 + dp
    y, y_ref = net(x), ref(x)
    harness.check(torch.equal(y, y_ref), f"tensor-parallel forward: {y} against {y_ref}")
    y.sum().backward()
    y_ref.sum().backward()
    for (name, w), w_ref in zip(net.named_parameters(), ref.parameters()):
        g = w.grad.full_tensor()
        harness.check(torch.equal(g, w_ref.grad), f"tensor-parallel gradient of {name}")


def sparse_input(dt, rank, hybrid=False, empty=False):
    """Rank `rank`'s sparse COO tensor: rank + 2 nonzeros, one index repeated (uncoalesced),
    some shared with other ranks; `hybrid`: a dense row of 3 per nonzero."""
    n = 0 if empty else rank + 2
    rows = [(rank * 2 + k) % 6 for k in range(n - 1)] + ([rank % 6] if n else [])
    cols = [(rank + k) % 4 for k in range(n)]
    if hybrid:
        idx = torch.tensor([rows], dtype=torch.int64).view(1, n)
        vals = torch.stack([values(dt, 3, rank, k) for k in range(n)]) if n else \
            torch.zeros(0, 3, dtype=dt)
        return torch.sparse_coo_tensor(idx, vals, (6, 3))
    idx = torch.tensor([rows, cols], dtype=torch.int64).view(2, n)
    return torch.sparse_coo_tensor(idx, values(dt, n, rank), (6, 4))


def sparse_reference(inputs):
    """The coalesced sum of every rank's sparse tensor (indices, values, dense), computed
    here in float64 / int64."""
    wide = torch.float64 if inputs[0].dtype.is_floating_point else torch.int64
    dt = inputs[0].dtype
    total = torch.sparse_coo_tensor(torch.cat([t._indices() for t in inputs], 1),
                                    torch.cat([t._values().to(wide) for t in inputs]),
                                    inputs[0].shape).coalesce()
    vals = total._values() != 0 if dt == torch.bool else total._values().to(dt)
    dense = total.to_dense() != 0 if dt == torch.bool else total.to_dense().to(dt)
    return [total._indices(), vals, dense]


def sparse(rank, size, gloo):
    """all_reduce of sparse COO tensors (what DDP sends for sparse gradients): SUM only, every
    dtype, hybrid tensors, a rank with no nonzeros; the result coalesced, as gloo's."""
    for dt in DTYPES:
        for hybrid, empty_rank in ((False, -1), (True, -1), (False, 0)):
            def make(r):
                return sparse_input(dt, r, hybrid, r == empty_rank)

            def all_reduce(g):
                t = make(rank)
                w = dist.all_reduce(t, group=g, async_op=True)
                w.wait()
                got = w.get_future().value()[0]
                harness.check(t.is_coalesced() and torch.equal(got.to_dense(), t.to_dense()),
                              "the work's future holds the coalesced sum")
                return [t._indices(), t._values(), t.to_dense()]
            compare(f"all_reduce of a sparse {dt} tensor (hybrid {hybrid}, empty rank "
                    f"{empty_rank})", all_reduce, gloo,
                    sparse_reference([make(r) for r in range(size)]))
    for op in ("MAX", "AVG", "PRODUCT"):
        try:
            dist.all_reduce(sparse_input(torch.float32, rank), getattr(dist.ReduceOp, op))
        except RuntimeError as e:
            harness.check(f"sums (ReduceOp.SUM); ReduceOp.{op} is not supported" in str(e), str(e))
        else:
            raise AssertionError(f"sparse all_reduce with {op} returned")
    if size > 1:  # one rank's tensor has another shape: every rank raises, naming it
        last = size - 1
        t = torch.sparse_coo_tensor(torch.tensor([[0], [0]]), torch.ones(1),
                                    (6, 5 if rank == last else 4))
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            harness.check(f"rank {last}'s is 6 x 5, rank 0's 6 x 4" in str(e), str(e))
        else:
            raise AssertionError("sparse all_reduce of different shapes returned")
    dist.barrier()


def bad_arguments(rank, size, gloo):
    """Calls tutti refuses on every rank before anything is sent, saying what is wrong."""
    cases = [
        (lambda: dist.all_gather([torch.zeros(3) for _ in range(size)], torch.zeros(2)),
         "all_gather: every output tensor needs 2 elements, got 3"),
        (lambda: dist.reduce_scatter(torch.zeros(2), [torch.zeros(2) for _ in range(size + 1)]),
         f"reduce_scatter needs one list of {size} input tensors"),
        (lambda: dist.all_reduce(torch.zeros(2), dist.ReduceOp.BAND),
         "ReduceOp.BAND is not defined on Float tensors"),
    ]
    for call, text in cases:
        try:
            call()
        except RuntimeError as e:
            harness.check(text in str(e), f"expected '{text}' in: {e}")
        else:
            raise AssertionError(f"returned instead of raising '{text}'")
    dist.barrier()  # the group still works


def run_all(rank, size, init):
    dist.init_process_group("tutti", init_method=init, rank=rank, world_size=size)
    gloo = dist.new_group(backend="gloo")
    for part in (reductions, sparse, data_movement, point_to_point, objects, groups, mesh,
                 bad_arguments):
        part(rank, size, gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    harness.main([run_all], sizes=[1, 2, 3, 4])
