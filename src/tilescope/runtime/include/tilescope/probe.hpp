// Probes: `ts.probe(tile, "name")` in a kernel, and the probe build `tilescope localize` makes of a
// kernel to see every statement's tile.
//
// A kernel with probes defines `probe_sink` (null) and exports `ts_probe_install`, through which
// the runtime's loader points it at the core's ts_probe_record for a run with probes on, and back
// at null after. With the sink null a probe is one well-predicted branch: no copy, no call.
// The math is untouched either way: a probe only reads its tile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include <tilescope/tile_core.hpp>
#include <tilescope/tile_fused.hpp>
#include <tilescope/tile_view.hpp>

namespace ts {

/// Where a kernel's probes go (ts_probe_record's signature): the tile's elements, contiguous.
using ProbeSink = void (*)(int32_t probe_id, const void *data, int32_t dtype, int64_t rows, int64_t cols);

/// Hands tile `t` to `sink` as probe `id`; nothing when `sink` is null.
template <class T, int R, int C>
inline void probe(ProbeSink sink, int32_t id, const Tile<T, R, C> &t) {
    if (__builtin_expect(sink != nullptr, 0)) sink(id, t.data, dtype_of<T>(), R, C);
}

/// Hands tile view `v` (tile_view.hpp) to `sink` as probe `id`: its rows as they are when they
/// lie one after another, else copied together (on the heap: a view's tile may be as large as the
/// worker's stack allows); nothing when `sink` is null.
template <class T, int R, int C>
inline void probe(ProbeSink sink, int32_t id, const TileView<T, R, C> &v) {
    if (__builtin_expect(sink == nullptr, 1)) return;
    if (R == 1 || v.stride == C) {
        sink(id, v.data, dtype_of<T>(), R, C);
        return;
    }
    const std::unique_ptr<T[]> rows(new T[static_cast<size_t>(R) * C]);
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) rows[static_cast<size_t>(r) * C + c] = v.data[r * v.stride + c];
    }
    sink(id, rows.get(), dtype_of<T>(), R, C);
}

/// Hands the elements of fused expression `e` (a tile the kernel computes again where it reads
/// it, kernel_fusion.py) to `sink` as probe `id`, computed into a tile on the heap first; nothing
/// when `sink` is null.
template <class T, int R, int C, class F>
inline void probe(ProbeSink sink, int32_t id, const detail::Fused<T, R, C, F> &e) {
    if (__builtin_expect(sink == nullptr, 1)) return;
    const std::unique_ptr<T[]> rows(new T[static_cast<size_t>(R) * C]);
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) rows[static_cast<size_t>(r) * C + c] = e.f(r, c);
    }
    sink(id, rows.get(), dtype_of<T>(), R, C);
}

/// Hands the R x C box of `view` at `offsets` (along the axes A of the store) to `sink` as probe
/// `id` (what a store there just wrote); nothing when `sink` is null.
template <int R, int C, class A = LastAxes, class T, std::size_t N>
inline void probe_box(ProbeSink sink, int32_t id, const TensorView<T> &view, const int64_t (&offsets)[N]) {
    if (__builtin_expect(sink != nullptr, 0)) {
        const Tile<T, R, C> t = load<R, C, A>(view, offsets);
        sink(id, t.data, dtype_of<T>(), R, C);
    }
}

}  // namespace ts
