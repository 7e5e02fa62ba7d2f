// ts::detail::Message: the text of an error a kernel throws, built in a fixed buffer.
//
// Every error message of the tile library (bounds, ragged counts, index arithmetic) is built
// with it rather than with std::string: the cold paths that build them are compiled into every
// kernel, and std::string's inlined code made them about a third of a small kernel's compile
// time (0.64 -> 0.45 s for softmax's row kernel, g++ 12, -O3).
//
// Invariants:
//  - Integers print as std::to_string prints them (decimal, a leading '-'); 128-bit ones too.
//  - The text is NUL-terminated at every step. Past kCapacity - 1 bytes the rest is dropped and
//    the text ends in "..." (a DSL path of kilobytes is the only way to get there).
#pragma once

#include <cstdint>

namespace ts {

namespace detail {

/// A one-line error message built by appending text and integers (decimal, as std::to_string
/// writes them), truncated to kCapacity - 1 bytes.
class Message {
public:
    static constexpr int kCapacity = 4096;

    Message &operator<<(const char *s) {
        if (s == nullptr) s = "(null)";
        while (*s != '\0') put(*s++);
        return *this;
    }
    Message &operator<<(char c) {
        put(c);
        return *this;
    }
    Message &operator<<(int v) { return *this << static_cast<__int128>(v); }
    Message &operator<<(long v) { return *this << static_cast<__int128>(v); }
    Message &operator<<(long long v) { return *this << static_cast<__int128>(v); }
    Message &operator<<(__int128 v) {
        char digits[48];
        int n = 0;
        unsigned __int128 u = v < 0 ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
        do {
            digits[n++] = static_cast<char>('0' + static_cast<int>(u % 10));
            u /= 10;
        } while (u != 0);
        if (v < 0) put('-');
        while (n > 0) put(digits[--n]);
        return *this;
    }
    /// "[v0, v1, ...]" of the first n values.
    Message &list(const int64_t *v, int n) {
        put('[');
        for (int i = 0; i < n; ++i) {
            if (i) *this << ", ";
            *this << static_cast<__int128>(v[i]);
        }
        put(']');
        return *this;
    }
    const char *c_str() const { return text_; }

private:
    void put(char c) {
        if (len_ < kCapacity - 1) {
            text_[len_++] = c;
            text_[len_] = '\0';
        } else {
            text_[kCapacity - 4] = text_[kCapacity - 3] = text_[kCapacity - 2] = '.';
        }
    }
    char text_[kCapacity] = {};
    int len_ = 0;
};

}  // namespace detail

}  // namespace ts
