// tilescope tile library: int8 weights packed once and kept from run to run.
//
//   Tile<int32_t, M, N> g = ...;
//   matmul_acc(g, q, weight(view<256, 352>(wg, {c, j}, {extent(h)})));
//
// A `ts.Weight` parameter is an input the caller keeps the same from run to run (a layer's
// weights). An int8 matmul packs its b operand before it multiplies (tile_matmul_i8.hpp); for
// b read in place from a weight, the packed tile is kept in this kernel library's cache, keyed
// by where the tile is (address, row stride, shape), and later matmuls of the same tile read
// it from there instead of packing it again. With few rows of a (16 tokens of a MoE layer)
// packing cost as much as multiplying; and the packed tile is one contiguous block, panel after
// panel, which streams from memory better than the tensor's rows.
//
// The run path (launch/weights.py) calls the library's `ts_weights_changed_in(ranges, n)`
// (generated into a kernel with weight parameters) with the bytes of each weight argument it has
// not seen before in its present state (another tensor, or the same one changed since: its torch
// version counter), and of each weight it saw that was freed. That drops the packed tiles that
// read those bytes; the next matmuls pack them again. `ts_weights_changed()` drops every tile
// (`CompiledProgram.weights_changed()`).
//
// Invariants:
//  - A packed tile gives exactly the result the unpacked path gives: int8 products summed in
//    int32 wrap mod 2^32 in any order. Every column of a cached tile's result comes from the
//    packed copy (the edge columns past the last whole vector too, copied as they are).
//  - A tile is used from the cache only when the view reads it in place (a copy lives on the
//    stack, and another call's copy may sit at the same address). Where a call takes AMX, the
//    cached tile is in the layout AMX reads (a layout of its own in the key).
//  - A packed tile is never changed once made: a matmul holds its own reference, so dropping the
//    cache (another thread's run changed weights) cannot free a tile being read.
//  - The buffers of dropped tiles are kept for the next tiles of the same size until the next
//    drop, so a caller passing new weight tensors every run does not allocate (and fault in)
//    fresh memory every run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include <tilescope/tile_matmul_i8.hpp>

namespace ts {

/// An int8 view of a `ts.Weight` parameter as a matmul's b operand: `weight(view<K, N>(...))`.
template <int R, int C>
struct WeightView {
    const TileView<int8_t, R, C> &view;
};

/// `v`, read by int8 matmuls through the packed-weight cache.
template <int R, int C>
inline WeightView<R, C> weight(const TileView<int8_t, R, C> &v) {
    return {v};
}

namespace detail {

/// The kernel library's packed weight tiles (see the top of this file).
class WeightCache {
public:
    struct Packed {
        int32_t *data;
        std::size_t bytes;
        explicit Packed(std::size_t n) : data(static_cast<int32_t *>(std::aligned_alloc(64, (n + 63) / 64 * 64))), bytes(n) {
            if (data == nullptr) throw std::bad_alloc();
        }
        Packed(const Packed &) = delete;
        Packed &operator=(const Packed &) = delete;
        ~Packed() { std::free(data); }
    };

    /// The packed tile of `key`, made with `pack(data)` into `bytes` bytes when there is none.
    template <class Pack>
    std::shared_ptr<const Packed> get(const void *b, int64_t ldb, int rows, int cols, int layout, std::size_t bytes,
                                      Pack &&pack) {
        const Key key{b, ldb, rows, cols, layout};
        std::shared_ptr<Packed> made;
        {
            std::lock_guard<std::mutex> hold(mutex_);
            auto it = tiles_.find(key);
            if (it != tiles_.end()) return it->second;
            made = take_spare(bytes);
        }
        if (!made) made = std::make_shared<Packed>(bytes);
        pack(made->data);  // outside the lock: packing a tile takes microseconds
        std::lock_guard<std::mutex> hold(mutex_);
        auto [it, inserted] = tiles_.emplace(key, made);  // another thread may have packed it meanwhile
        return it->second;
    }

    /// Drop every packed tile (a weight changed); their buffers become the spares.
    void changed() {
        std::lock_guard<std::mutex> hold(mutex_);
        spares_.clear();
        for (auto &entry : tiles_) spare(entry.second);
        tiles_.clear();
    }

    /// Drop the packed tiles that read any byte of the n ranges [lo, hi) at `ranges` (lo, hi, lo,
    /// hi, ...: the weights there changed, or were freed); their buffers become the spares.
    void changed(const uint64_t *ranges, int n) {
        std::lock_guard<std::mutex> hold(mutex_);
        spares_.clear();
        for (auto it = tiles_.begin(); it != tiles_.end();) {
            const Key &k = it->first;  // the tile's bytes: rows ldb apart (either way), cols each
            const int64_t last_row = (k.rows - 1) * k.ldb;
            const auto b = static_cast<uint64_t>(reinterpret_cast<std::uintptr_t>(k.b));
            const uint64_t lo = b + static_cast<uint64_t>(last_row < 0 ? last_row : 0);
            const uint64_t hi = b + static_cast<uint64_t>((last_row > 0 ? last_row : 0) + k.cols);
            bool hit = false;
            for (int r = 0; r < n && !hit; ++r) hit = lo < ranges[2 * r + 1] && ranges[2 * r] < hi;
            if (hit) {
                spare(it->second);
                it = tiles_.erase(it);
            } else {
                ++it;
            }
        }
    }

    /// How many packed tiles the cache holds (for tests).
    std::size_t size() {
        std::lock_guard<std::mutex> hold(mutex_);
        return tiles_.size();
    }

private:
    struct Key {
        const void *b;
        int64_t ldb;
        int rows, cols, layout;
        bool operator==(const Key &o) const {
            return b == o.b && ldb == o.ldb && rows == o.rows && cols == o.cols && layout == o.layout;
        }
    };
    struct KeyHash {
        std::size_t operator()(const Key &k) const {
            std::size_t h = reinterpret_cast<std::uintptr_t>(k.b);
            for (int64_t x : {k.ldb, int64_t{k.rows}, int64_t{k.cols}, int64_t{k.layout}}) h = h * 1000003u ^ static_cast<std::size_t>(x);
            return h;
        }
    };

    /// Keep a dropped tile's buffer for the next tile of its size, unless a matmul still reads it.
    void spare(std::shared_ptr<Packed> &p) {
        if (p.use_count() == 1) spares_.emplace(p->bytes, std::move(p));
    }

    std::shared_ptr<Packed> take_spare(std::size_t bytes) {
        auto it = spares_.find(bytes);
        if (it == spares_.end()) return nullptr;
        std::shared_ptr<Packed> p = std::move(it->second);
        spares_.erase(it);
        return p;
    }

    std::mutex mutex_;
    std::unordered_map<Key, std::shared_ptr<Packed>, KeyHash> tiles_;
    std::multimap<std::size_t, std::shared_ptr<Packed>> spares_;
};

/// This kernel library's cache: one per shared object (hidden, so libraries never share one).
[[gnu::visibility("hidden")]] inline WeightCache &weight_cache() {
    static WeightCache cache;
    return cache;
}

#if defined(__AVX512BW__) || defined(__AVX2__) || defined(__SSE2__)
/// The packed layout of a K x N weight tile: the panels matmul_i8 multiplies, one after the other
/// (each KP rows of its NV * W lanes: kMatmulI8Vecs vectors wide, then at most one of one vector),
/// then with VNNI the column sums of those (a is packed as a + 128, so 128 * colsum comes off c),
/// then the columns past the last whole vector as they are (K rows of N % W bytes), which plain
/// loops multiply.
template <int N, int K>
struct WeightLayout {
    static constexpr int W = I8Vec::width, G = I8Vec::group, NB = kMatmulI8Vecs * W, KP = (K + G - 1) / G;
    static constexpr int wide = N / NB;                  // panels of NB lanes
    static constexpr int narrow = (N - wide * NB) / W;   // then panels of W lanes
    static constexpr int packed_cols = wide * NB + narrow * W;
    static constexpr int edge = N - packed_cols;         // then these columns, unpacked
    static constexpr std::size_t sums = G == 4 ? packed_cols : 0;
    static constexpr std::size_t lanes = static_cast<std::size_t>(KP) * packed_cols + sums;
    static constexpr std::size_t bytes = lanes * sizeof(int32_t) + static_cast<std::size_t>(K) * edge;
    static constexpr int id = G * 100 + W;  // the cache key's layout: the instruction set's packing

    /// Where the panel of columns from j0 starts.
    static constexpr std::size_t panel(int j0) { return static_cast<std::size_t>(KP) * j0; }

    /// The edge columns: K rows of `edge` bytes.
    static int8_t *edge_cols(int32_t *packed) { return reinterpret_cast<int8_t *>(packed + lanes); }
    static const int8_t *edge_cols(const int32_t *packed) { return reinterpret_cast<const int8_t *>(packed + lanes); }

    static void pack(int32_t *out, const int8_t *b, int64_t ldb) {
        if constexpr (edge > 0) {
            int8_t *e = edge_cols(out);
            for (int k = 0; k < K; ++k) {
                for (int j = 0; j < edge; ++j) e[k * edge + j] = b[k * ldb + packed_cols + j];
            }
        }
        int j = 0;
        for (; j + NB <= N; j += NB) pack_b_i8<G, NB, K, KP, true>(out + panel(j), b + j, ldb);
        for (; j + W <= N; j += W) pack_b_i8<G, W, K, KP, true>(out + panel(j), b + j, ldb);
        if constexpr (G == 4) {
            alignas(64) int32_t ones[KP];
            for (int kp = 0; kp < KP; ++kp) ones[kp] = 0x01010101;
            int32_t *colsum = out + static_cast<std::size_t>(KP) * packed_cols;
            for (int c = 0; c < packed_cols; ++c) colsum[c] = 0;
            for (j = 0; j + NB <= N; j += NB) register_block<I8Vec, 1, kMatmulI8Vecs>(ones, KP, out + panel(j), NB, colsum + j, NB, KP);
            for (; j + W <= N; j += W) register_block<I8Vec, 1, 1>(ones, KP, out + panel(j), W, colsum + j, W, KP);
        }
    }
};

/// c (M x N int32) += a (M x K) @ b (K x N) with b a weight tile read in place at b (rows ldb
/// apart), packed once into the cache; exactly matmul_i8's result.
template <int M, int N, int K>
[[gnu::noinline]] inline void matmul_i8_weight(int32_t *c, const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb) {
    using L = WeightLayout<N, K>;
    constexpr int W = L::W, G = L::G, NB = L::NB, KP = L::KP, MR = kMatmulI8Rows;
    const auto packed = weight_cache().get(b, ldb, K, N, L::id, L::bytes,
                                           [&](int32_t *out) { L::pack(out, b, ldb); });
    const int32_t *bp = packed->data;
    alignas(64) int32_t ap[M * KP];
    pack_a_i8<G, M, K, KP>(ap, a, lda);
    if constexpr (G == 4) {  // sum (a + 128) b = a @ b + 128 colsum(b)
        const int32_t *colsum = bp + static_cast<std::size_t>(KP) * L::packed_cols;
        for (int i = 0; i < M; ++i) {
            for (int j = 0; j < L::packed_cols; ++j) {
                uint32_t &x = reinterpret_cast<uint32_t &>(c[i * N + j]);
                x -= static_cast<uint32_t>(colsum[j]) << 7;
            }
        }
    }
    auto panel = [&](auto nv, int j0) {
        constexpr int NV = decltype(nv)::value;
        const int32_t *p = bp + L::panel(j0);
        int i = 0;
        for (; i + MR <= M; i += MR) register_block<I8Vec, MR, NV>(ap + i * KP, KP, p, NV * W, c + i * N + j0, N, KP);
        if constexpr (M % MR != 0) register_block<I8Vec, M % MR, NV>(ap + i * KP, KP, p, NV * W, c + i * N + j0, N, KP);
    };
    int j = 0;
    for (; j + NB <= N; j += NB) panel(std::integral_constant<int, kMatmulI8Vecs>{}, j);
    for (; j + W <= N; j += W) panel(std::integral_constant<int, 1>{}, j);
    if constexpr (L::edge > 0) {  // column j of the edge is (edge_cols - packed_cols)[k * edge + j]
        const int8_t *e = L::edge_cols(bp) - L::packed_cols;
        matmul_i8_columns<M, N, K, L::packed_cols>(c, a, lda, e, L::edge);
    }
}
#endif

#ifdef TS_MATMUL_AMX
/// The AMX path's matmul_i8_weight: the cached tile in the layout AMX reads (pack_b_i8's groups of
/// 4 rows, K / 4 rows of N lanes), then amx_multiply.
template <int M, int N, int K>
[[gnu::noinline]] inline void matmul_i8_weight_amx(int32_t *c, const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb) {
    constexpr std::size_t bytes = static_cast<std::size_t>(K / 4) * N * sizeof(int32_t);
    constexpr int layout = 1;  // no WeightLayout id is 1
    const auto packed = weight_cache().get(b, ldb, K, N, layout, bytes,
                                           [&](int32_t *out) { pack_b_i8<4, N, K, K / 4, true>(out, b, ldb); });
    amx_multiply<M, N, K>(c, a, lda, packed->data);
}
#endif

/// acc += a @ b for int8 a and a weight tile b: from the cache where the invariants allow.
template <int M, int N, class A, int K>
inline void matmul_acc_weight(Tile<int32_t, M, N> &acc, const A &a, const TileView<int8_t, K, N> &b) {
    using OA = I8Operand<A>;
    static_assert(OA::cols == K, "matmul: a's column count must equal b's row count");
    static_assert(M == OA::rows, "matmul_acc: acc must have a's rows and b's columns");
#if defined(__AVX512BW__) || defined(__AVX2__) || defined(__SSE2__)
    if (b.data != b.copy.data) {  // read in place: the tile's address names it
#ifdef TS_MATMUL_AMX
        if constexpr (amx_shape_v<M, N, K>) {
            if (amx_permitted()) {
                matmul_i8_weight_amx<M, N, K>(acc.data, OA::data(a), OA::stride(a), b.data, b.stride);
                return;
            }
        }
#endif
        if constexpr (N >= I8Vec::width) {
            matmul_i8_weight<M, N, K>(acc.data, OA::data(a), OA::stride(a), b.data, b.stride);
            return;
        }
    }
#endif
    matmul_acc(acc, a, b);
}

}  // namespace detail

/// Drop this kernel library's packed weights (a weight changed): what `ts_weights_changed` does.
inline void weights_changed() { detail::weight_cache().changed(); }

/// Drop the packed weights that read the n byte ranges at `ranges` (lo, hi pairs): what
/// `ts_weights_changed_in` does.
inline void weights_changed_in(const uint64_t *ranges, int n) { detail::weight_cache().changed(ranges, n); }

/// acc += a @ b for int8 a (a tile or a view) and b a weight's view (see the top of this file).
template <int M, int N, class A, int K, std::enable_if_t<detail::I8Operand<A>::ok, int> = 0>
inline void matmul_acc(Tile<int32_t, M, N> &acc, const A &a, const WeightView<K, N> &b) {
    detail::matmul_acc_weight(acc, a, b.view);
}

/// a @ b as an int32 tile for int8 a and b a weight's view.
template <class A, int K, int N, std::enable_if_t<detail::I8Operand<A>::ok, int> = 0>
inline Tile<int32_t, detail::I8Operand<A>::rows, N> matmul(const A &a, const WeightView<K, N> &b) {
    auto acc = zeros<int32_t, detail::I8Operand<A>::rows, N>();
    detail::matmul_acc_weight(acc, a, b.view);
    return acc;
}

}  // namespace ts
