// tilescope tile library: the rows a loop's next pass reads, asked for while a costly expression
// is computed.
//
// A kernel that takes a task's rows a step at a time reads each step's rows from memory in its
// first pass (a row reduction) and computes the rest from the cache. While it computes a costly
// elementwise expression (an exp, a log: tens of instructions per vector) it asks memory for
// nothing, and the next step's first pass then waits for its rows. The kernel generator wraps such
// an expression, where it becomes a tile, in
//     prefetching(exp(fuse(t) - row_max(t)), {next_rows<4, 1024>(x, {s + 4, 0})})
// which computes the tile exactly as the conversion of the expression does (element by element,
// the same ops, the same bits) in chunks of kPrefetchChunk columns, and before each chunk asks for
// that chunk's share of the next step's cache lines (a prefetch: no load, no fault, nothing for
// the bounds check or the access audit), so they arrive while it computes.
//
// Invariants:
//  - next_rows() names nothing (no rows) when the box is not inside the tensor or its columns are
//    not contiguous; a box the loop never reads (past its last step) is harmless, only wasted.
//  - The prefetched lines are spread evenly over the tile's chunks, in row order.
#pragma once

#include <cstdint>
#include <initializer_list>

#include <tilescope/tile_core.hpp>
#include <tilescope/tile_fused.hpp>

namespace ts {

/// `rows` rows of `row_bytes` bytes each, `stride` bytes apart, from `base`: what a loop's next pass
/// reads. None when rows is 0.
struct NextRows {
    const char *base = nullptr;
    int64_t stride = 0;
    int64_t rows = 0;
    int64_t row_bytes = 0;
};

/// The R x C box of `tensor` at `offsets` (default axes), the box view<R, C>(tensor, offsets)
/// would read, as rows to prefetch (see the invariants).
template <int R, int C, class T, std::size_t N>
inline NextRows next_rows(const TensorView<T> &tensor, const int64_t (&offsets)[N]) {
    static_assert(detail::fits_axes<LastAxes, N, R, C>(), "a tile dim with no tensor dim has size 1");
    if (!detail::box_inside<LastAxes>(tensor, offsets, R, C)) return {};
    const auto box = detail::locate<LastAxes>(tensor, offsets);
    if (C > 1 && box.col_stride != 1) return {};
    return {reinterpret_cast<const char *>(box.base), box.row_stride * static_cast<int64_t>(sizeof(T)), R,
            C * static_cast<int64_t>(sizeof(T))};
}

/// Columns computed between two rounds of prefetches.
inline constexpr int kPrefetchChunk = 256;

namespace detail {

/// Where row `row` of `n` starts and how many cache lines it touches.
inline const char *row_start(const NextRows &n, int64_t row, int64_t &lines) {
    const char *first = n.base + row * n.stride;
    const int64_t lead = static_cast<int64_t>(reinterpret_cast<uintptr_t>(first) & 63);
    lines = (lead + n.row_bytes + 63) / 64;
    return first - lead;
}

}  // namespace detail

/// The tile of expression `e`, computed as its conversion to a tile computes it, asking for the
/// cache lines of `next` a share before each chunk of columns (see the top of this file).
template <class T, int R, int C, class F>
inline Tile<T, R, C> prefetching(const detail::Fused<T, R, C, F> &e, std::initializer_list<NextRows> next) {
    constexpr int64_t chunks = static_cast<int64_t>(R) * ((C + kPrefetchChunk - 1) / kPrefetchChunk);
    int64_t total = 0, lines = 0;
    for (const NextRows &n : next) {
        for (int64_t row = 0; row < n.rows; ++row) {
            detail::row_start(n, row, lines);
            total += lines;
        }
    }
    // the next line to ask for: line `line` of row `row` of *at (`lines` of them, from `start`)
    const NextRows *at = next.begin();
    int64_t row = 0, line = 0, asked = 0, chunk = 0;
    const char *start = nullptr;
    lines = 0;
    Tile<T, R, C> out;
    for (int r = 0; r < R; ++r) {
        T *o = out.data + r * C;
        for (int c0 = 0; c0 < C; c0 += kPrefetchChunk) {
            const int64_t until = total * ++chunk / chunks;
            for (; asked < until; ++asked) {
                if (line == lines) {  // the next row with lines (total counts exactly these)
                    for (line = 0; row == at->rows; ++at) row = 0;
                    start = detail::row_start(*at, row++, lines);
                }
                __builtin_prefetch(start + 64 * line++);
            }
            // NOTE: constant trip counts: g++ vectorizes them as the whole row's
            if (c0 + kPrefetchChunk <= C) {
                detail::compute_cols<kPrefetchChunk>(e.f, r, c0, o + c0);
            } else {
                detail::compute_cols<C % kPrefetchChunk>(e.f, r, c0, o + c0);
            }
        }
    }
    return out;
}

}  // namespace ts
