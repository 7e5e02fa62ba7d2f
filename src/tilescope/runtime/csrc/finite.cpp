#include "finite.hpp"

#include <cstring>

#include "dtype.hpp"

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
    const int64_t itemsize = dtype_itemsize(t.dtype);
    int64_t shape[TS_MAX_DIMS], strides[TS_MAX_DIMS];
    const int32_t pad = TS_MAX_DIMS - t.ndim;
    for (int32_t d = 0; d < TS_MAX_DIMS; ++d) {
        shape[d] = d < pad ? 1 : t.shape[d - pad];
        strides[d] = d < pad ? 0 : t.strides[d - pad];
    }
    const char *base = static_cast<const char *>(t.data) + t.offset * itemsize;
    int64_t index = 0;
    for (int64_t i0 = 0; i0 < shape[0]; ++i0)
        for (int64_t i1 = 0; i1 < shape[1]; ++i1)
            for (int64_t i2 = 0; i2 < shape[2]; ++i2) {
                const char *row = base + (i0 * strides[0] + i1 * strides[1] + i2 * strides[2]) * itemsize;
                const int64_t step = strides[3] * itemsize;
                switch (itemsize) {
                    case 2: scan_row<uint16_t>(row, shape[3], step, f, index, out); break;
                    case 4: scan_row<uint32_t>(row, shape[3], step, f, index, out); break;
                    default: scan_row<uint64_t>(row, shape[3], step, f, index, out); break;
                }
                index += shape[3];
            }
    return out;
}

}  // namespace ts::rt
