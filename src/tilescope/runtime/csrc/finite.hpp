// NaN/Inf scans of tensor regions, for nan_check.
#pragma once

#include <cstdint>

#include "tilescope/abi.h"

namespace ts::rt {

struct FiniteScan {
    int64_t nan = 0;
    int64_t inf = 0;
    int64_t first = -1;  // row-major index within the region of the first non-finite element
    bool clean() const { return nan == 0 && inf == 0; }
};

// Scan the region `t` views; integer and bool tensors are always clean.
FiniteScan scan_finite(const ts_tensor &t);

}  // namespace ts::rt
