#include "finite.hpp"

#include <cstring>

#include "region_rows.hpp"

namespace ts::rt {

namespace {

// Exponent and mantissa masks of a float format, on its raw bits.
struct Format {
    uint64_t exponent;
    uint64_t mantissa;
};

template <class Bits>
void scan_row(const char *row, int64_t n, int64_t stride_bytes, Format f, int64_t base, FiniteScan &out) {
    for (int64_t j = 0; j < n; ++j) {
        Bits b;
        std::memcpy(&b, row + j * stride_bytes, sizeof(Bits));
        const uint64_t bits = static_cast<uint64_t>(b);
        if ((bits & f.exponent) != f.exponent) continue;
        if (bits & f.mantissa)
            ++out.nan;
        else
            ++out.inf;
        if (out.first < 0) out.first = base + j;
    }
}

}  // namespace

FiniteScan scan_finite(const ts_tensor &t) {
    FiniteScan out;
    Format f{};
    switch (t.dtype) {
        case TS_F32: f = {0x7f800000u, 0x007fffffu}; break;
        case TS_F16: f = {0x7c00u, 0x03ffu}; break;
        case TS_BF16: f = {0x7f80u, 0x007fu}; break;
        case TS_F64: f = {0x7ff0000000000000ull, 0x000fffffffffffffull}; break;
        default: return out;
    }
    const Rows r = rows_of(t);
    const int64_t step = r.strides[kRowDim] * r.itemsize;
    for_each_row(r, [&](const char *row, int64_t index) {
        switch (r.itemsize) {
            case 2: scan_row<uint16_t>(row, r.shape[kRowDim], step, f, index, out); break;
            case 4: scan_row<uint32_t>(row, r.shape[kRowDim], step, f, index, out); break;
            default: scan_row<uint64_t>(row, r.shape[kRowDim], step, f, index, out); break;
        }
        return true;
    });
    return out;
}

}  // namespace ts::rt
