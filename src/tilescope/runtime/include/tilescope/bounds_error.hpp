// ts::BoundsError: what a kernel throws for an access outside its tensor, with where it is.
//
// Shared by the tile library (which throws it) and the runtime core (which catches it and
// records the site in the run's failure record, so reports need not parse its message).
//
// Invariants:
//  - what() is one line, worded for a person (check.hpp gives the format).
//  - `site` names the op when a checked build threw it (its CheckSite, from the kernel's table of
//    static strings); an unchecked ragged access outside its tile has a site with null names and
//    arg -1. The strings live in the kernel's shared object: copy them before it is unloaded.
#pragma once

#include <stdexcept>

#include <tilescope/message.hpp>

namespace ts {

/// Where a checked load/store is: what a BoundsError names.
struct CheckSite {
    const char *kernel = nullptr;  // kernel name
    const char *op = nullptr;      // "load", "store" or "load_rows"
    const char *tensor = nullptr;  // the tensor parameter's DSL name
    int arg = -1;                  // its index in the kernel's arguments
    const char *where = nullptr;   // DSL file:line
};

/// An access outside its tensor (a checked build's load/store, check.hpp), or a ragged access
/// whose valid counts lie outside its tile (any build).
struct BoundsError : std::out_of_range {
    explicit BoundsError(const char *what, const CheckSite &at = CheckSite{}) : std::out_of_range(what), site(at) {}
    CheckSite site;
};

namespace detail {

/// Appends "kernel <k>: <op> of <t> (arg <i>) at <file>:<line>: ", the start of every message of a
/// checked op.
inline Message &site_prefix(Message &m, const CheckSite &site) {
    return m << "kernel " << site.kernel << ": " << site.op << " of " << site.tensor << " (arg " << site.arg
             << ") at " << site.where << ": ";
}

}  // namespace detail

}  // namespace ts
