// Index arithmetic with Python semantics, shared by generated kernels and orchestrations:
// floor division and a modulo whose sign follows the divisor; the checked arithmetic of integer
// scalars and of divisions known only at run time (`arith`); and the check of a loop bound known
// only at run time (`ts.range(0, n, 64)`), which must not be negative.
//
// Invariants of `arith<Op, T>(a, b, type, what)`:
//  - The exact result is computed in 128 bits and must fit T (the DSL dtype `type`): nothing
//    wraps. A division or modulo by zero, and a result outside T (`-2**63 // -1`, an i32 product
//    past 2**31), throw ts::ArithmeticError before anything uses the value, naming `what` (the
//    expression and its DSL line) and the operands, as the interpreter words the same error:
//      integer division by zero: n // d at m.py:12 (5 // 0)
//      i32 overflow: r * r at m.py:12 (65536 * 65536 = 4294967296) is outside i32's range
//      [-2147483648, 2147483647]
//  - A kernel's throw is reported with its task; an orchestration's with the run's failure.
#ifndef TILESCOPE_INDEX_HPP
#define TILESCOPE_INDEX_HPP

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <tilescope/message.hpp>

namespace ts {

/// What checked integer arithmetic throws: a division by zero, or a result its dtype cannot hold.
class ArithmeticError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

inline int64_t floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

inline int64_t floormod(int64_t a, int64_t b) {
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

namespace detail {

inline const char *op_text(char op) {
    switch (op) {
        case '+': return " + ";
        case '-': return " - ";
        case '*': return " * ";
        case '/': return " // ";
        default: return " % ";
    }
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_by_zero(char op, __int128 a, const char *what) {
    Message m;
    m << "integer division by zero: " << what << " (" << a << op_text(op) << "0)";
    throw ArithmeticError(m.c_str());
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_overflow(char op, __int128 a, __int128 b, __int128 exact,
                                                                   __int128 lo, __int128 hi, const char *type,
                                                                   const char *what) {
    Message m;
    m << type << " overflow: " << what << " (" << a << op_text(op) << b << " = " << exact << ") is outside " << type
      << "'s range [" << lo << ", " << hi << "]";
    throw ArithmeticError(m.c_str());
}

}  // namespace detail

/// `a Op b` for integers of dtype T (Op: + - * / for floor division, % for the floor modulo),
/// exact, or ts::ArithmeticError (see the invariants above).
template <char Op, class T>
inline T arith(T a, T b, const char *type, const char *what) {
    const __int128 x = a, y = b;
    __int128 r;
    if constexpr (Op == '+') {
        r = x + y;
    } else if constexpr (Op == '-') {
        r = x - y;
    } else if constexpr (Op == '*') {
        r = x * y;
    } else {
        if (__builtin_expect(y == 0, 0)) detail::throw_by_zero(Op, x, what);
        const __int128 q = x / y, m = x % y;
        const bool adjust = m != 0 && ((m < 0) != (y < 0));
        r = Op == '/' ? (adjust ? q - 1 : q) : (adjust ? m + y : m);
    }
    constexpr __int128 lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
    if (__builtin_expect(r < lo || r > hi, 0)) detail::throw_overflow(Op, x, y, r, lo, hi, type, what);
    return static_cast<T>(r);
}

namespace detail {

/// Appends what a negative run-time loop bound reports; `what` names the loop, its line and the
/// bound (`ts.range(0, n, 64) at moe.py:41: stop n`).
inline Message &negative_bound(Message &m, int64_t value, const char *what) {
    return m << what << " is " << value << " at run time; a run-time loop bound must be >= 0";
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_negative_bound(int64_t value, const char *what) {
    Message m;
    throw std::out_of_range(negative_bound(m, value, what).c_str());
}

}  // namespace detail

/// The message of a negative run-time loop bound, for an orchestration's fail().
inline std::string negative_bound_message(int64_t value, const char *what) {
    detail::Message m;
    return detail::negative_bound(m, value, what).c_str();
}

/// Throws std::out_of_range (reported with the task that ran it) when a kernel's run-time loop
/// bound is negative.
inline void check_bound(int64_t value, const char *what) {
    if (__builtin_expect(value < 0, 0)) detail::throw_negative_bound(value, what);
}

}  // namespace ts

#endif  // TILESCOPE_INDEX_HPP
