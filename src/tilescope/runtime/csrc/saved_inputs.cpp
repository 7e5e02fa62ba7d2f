// Copying a task's inputs for replay (see saved_inputs.hpp for what the records hold).
#include "saved_inputs.hpp"

#include <algorithm>
#include <cstring>

#include "dtype.hpp"
#include "region_rows.hpp"
#include "tensor_dump.hpp"

namespace ts::rt {

void save_task_inputs(const Task &t, int32_t worker, const InoutSnapshot *snapshot,
                      std::vector<ts_dump_record> &records, std::vector<char> &payload) {
    for (int32_t i = 0; i < t.nargs; ++i) {
        const ts_arg &a = t.args[i];
        ts_dump_record rec = describe_arg(t, i, TS_DUMP_BEFORE_DISPATCH, worker);
        if (a.kind == TS_ARG_SCALAR) {
            records.push_back(rec);
            continue;
        }
        const ts_tensor &x = a.u.t;
        if (a.dir != TS_OUT) {
            const int64_t bytes = region_bytes(x);
            rec.bin_offset = static_cast<int64_t>(payload.size());
            payload.resize(payload.size() + static_cast<size_t>(bytes));
            char *dst = payload.data() + rec.bin_offset;
            const bool from_snapshot = snapshot != nullptr && a.dir == TS_INOUT && snapshot->offsets[i] >= 0;
            if (from_snapshot)
                std::memcpy(dst, snapshot->data.data() + snapshot->offsets[i], static_cast<size_t>(bytes));
            else
                copy_region(dst, x, dtype_itemsize(x.dtype), bytes);
            rec.bin_size = bytes;
            if (a.dir == TS_INOUT && !from_snapshot) rec.flags |= TS_SAVED_PARTIAL;
        }
        records.push_back(rec);
    }
}

}  // namespace ts::rt
