// Element-type facts the runtime needs: validity, size and a printable name (ts_dtype codes).
#pragma once

#include <cstdint>

#include "tilescope/abi.h"

namespace ts::rt {

inline bool dtype_valid(int32_t dtype) { return dtype >= TS_F32 && dtype <= TS_I64; }

// Bytes per element; 0 for an invalid code.
inline int32_t dtype_itemsize(int32_t dtype) {
    switch (dtype) {
        case TS_F32: case TS_I32: return 4;
        case TS_F16: case TS_BF16: return 2;
        case TS_I8: case TS_U8: case TS_BOOL: return 1;
        case TS_F64: case TS_I64: return 8;
        default: return 0;
    }
}

inline const char *dtype_name(int32_t dtype) {
    switch (dtype) {
        case TS_F32: return "f32";
        case TS_F16: return "f16";
        case TS_BF16: return "bf16";
        case TS_I32: return "i32";
        case TS_I8: return "i8";
        case TS_U8: return "u8";
        case TS_BOOL: return "bool";
        case TS_F64: return "f64";
        case TS_I64: return "i64";
        default: return "invalid";
    }
}

}  // namespace ts::rt
