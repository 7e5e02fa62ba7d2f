// Index arithmetic with Python semantics, shared by generated kernels and orchestrations:
// floor division and a modulo whose sign follows the divisor.
#ifndef TILESCOPE_INDEX_HPP
#define TILESCOPE_INDEX_HPP

#include <cstdint>

namespace ts {

inline int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

inline int64_t floormod(int64_t a, int64_t b) {
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

}  // namespace ts

#endif  // TILESCOPE_INDEX_HPP
