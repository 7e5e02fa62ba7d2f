// Index arithmetic with Python semantics, shared by generated kernels and orchestrations:
// floor division and a modulo whose sign follows the divisor; and the check of a loop bound
// known only at run time (`ts.range(0, n, 64)`), which must not be negative.
#ifndef TILESCOPE_INDEX_HPP
#define TILESCOPE_INDEX_HPP

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ts {

inline int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

inline int64_t floormod(int64_t a, int64_t b) {
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

/// What a negative run-time loop bound reports; `what` names the loop, its line and the bound
/// (`ts.range(0, n, 64) at moe.py:41: stop n`).
inline std::string negative_bound_message(int64_t value, const char *what) {
    return std::string(what) + " is " + std::to_string(value) + " at run time; a run-time loop bound must be >= 0";
}

/// Throws std::out_of_range (reported with the task that ran it) when a kernel's run-time loop
/// bound is negative.
inline void check_bound(int64_t value, const char *what) {
    if (__builtin_expect(value < 0, 0)) throw std::out_of_range(negative_bound_message(value, what));
}

}  // namespace ts

#endif  // TILESCOPE_INDEX_HPP
