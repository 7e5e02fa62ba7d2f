// tilescope tile library: non-temporal (streaming) stores, for a TensorView with `stream` set
// (tile_core.hpp's store() and tile_fused.hpp's): a row's aligned middle goes past the caches,
// its head and tail are plain stores, and the store fences before it returns.
#pragma once

#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace ts {

namespace detail {

#if defined(__AVX__)
constexpr int kStreamBytes = 32;  // one non-temporal store
inline void stream_bytes(void *dst, const void *src) {
    _mm256_stream_si256(static_cast<__m256i *>(dst), _mm256_load_si256(static_cast<const __m256i *>(src)));
}
#elif defined(__SSE2__)
constexpr int kStreamBytes = 16;
inline void stream_bytes(void *dst, const void *src) {
    _mm_stream_si128(static_cast<__m128i *>(dst), _mm_load_si128(static_cast<const __m128i *>(src)));
}
#endif

/// Elements a non-temporal row store takes at a time (256 bytes).
template <class T>
inline constexpr int kStreamChunk = 256 / static_cast<int>(sizeof(T));

/// dst[c] = at(c) for c in [0, n): the part of dst aligned to whole non-temporal stores goes past
/// the caches, 256 bytes at a time through a small aligned buffer that fill(c, buf) computes
/// (buf[j] = at(c + j) for j < kStreamChunk<T>); the head before it and the tail after it are
/// plain stores. Without SSE2, all plain stores. The caller fences (stream_fence).
template <class T, class At, class Fill>
inline void stream_row(T *dst, int n, const At &at, const Fill &fill) {
#if defined(__SSE2__)
    constexpr int chunk = kStreamChunk<T>;
    int c = 0;
    for (; c < n && reinterpret_cast<std::uintptr_t>(dst + c) % kStreamBytes != 0; ++c) dst[c] = at(c);
    for (; c + chunk <= n; c += chunk) {
        alignas(64) T buf[chunk];
        fill(c, buf);
        char *out = reinterpret_cast<char *>(dst + c);
        const char *in = reinterpret_cast<const char *>(buf);
        for (int b = 0; b < 256; b += kStreamBytes) stream_bytes(out + b, in + b);
    }
    for (; c < n; ++c) dst[c] = at(c);
#else
    (void)fill;
    for (int c = 0; c < n; ++c) dst[c] = at(c);
#endif
}

/// stream_row with each chunk filled element by element.
template <class T, class At>
inline void stream_row(T *dst, int n, const At &at) {
    stream_row(dst, n, at, [&at](int c, T *buf) {
        for (int j = 0; j < kStreamChunk<T>; ++j) buf[j] = at(c + j);
    });
}

/// Orders a task's non-temporal stores before whatever it does next (its completion included).
inline void stream_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

}  // namespace detail

}  // namespace ts
