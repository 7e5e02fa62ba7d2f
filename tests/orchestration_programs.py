"""The orchestration-features program (intermediate tensors, explicit deps and task names,
run-time branches on indices, nested loops, integer scalars) and its kernels, shared by the
orchestration, isolation and replay tests."""

import tilescope as ts

F = ts.f32


@ts.kernel
def scale(x: ts.Tensor[[8], F], y: ts.Out[[8], F], s: ts.Scalar[F]):
    ts.store(y, [0], ts.load(x, [0], [8]) * s)


@ts.kernel
def add_into(x: ts.Tensor[[8], F], acc: ts.InOut[[8], F]):
    ts.store(acc, [0], ts.load(acc, [0], [8]) + ts.load(x, [0], [8]))


@ts.kernel
def fill_index(y: ts.Out[[8], F], i: ts.Scalar[ts.i32]):
    ts.store(y, [0], ts.full([8], 1.0, F) * i)


@ts.jit
def features(x: ts.Tensor[[4, 8], F], out: ts.InOut[[4, 8], F], idx: ts.Out[[6, 8], F], s: ts.Scalar[F]):
    tmp = ts.create_tensor([4, 8], F)
    ts.dump_tag(tmp)
    for r in ts.range(0, 4):
        t = ts.submit(scale, x[r, :], tmp[r, :], s, name="scale_row")
        if r % 2 == 0:
            ts.submit(add_into, tmp[r, :], out[r, :], deps=[t])
        else:
            add_into(x[r, :], out[r, :])
    for a in ts.range(0, 2):
        for b in ts.range(0, 3):
            fill_index(idx[a * 3 + b, :], a * 10 + b // 2)
