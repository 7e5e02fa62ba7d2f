#include "tensor_map.hpp"

#include <algorithm>

namespace ts::rt {

void TensorMap::register_buffer(const ts_tensor &t) { buffer_for(t); }

TensorMap::BufferState &TensorMap::buffer_for(const ts_tensor &t) {
    auto [it, inserted] = buffers_.try_emplace(t.buffer_id, pool_);
    if (inserted) it->second.layout = layout_of(t);
    return it->second;
}

void TensorMap::add_task(int64_t task, const ts_arg *args, int32_t nargs, std::vector<FoundEdge> &edges) {
    edges.clear();
    accesses_.clear();
    for (int32_t i = 0; i < nargs; ++i) {
        if (args[i].kind != TS_ARG_TENSOR) continue;
        const ts_tensor &t = args[i].u.t;
        BufferState &buffer = buffer_for(t);
        Region region = region_of(t, buffer.layout);
        if (!region.empty()) accesses_.push_back(Access{&buffer, region, i, args[i].dir});
    }

    for (const Access &a : accesses_) {
        const int32_t after_writer = a.dir == TS_OUT ? TS_EDGE_WAW : TS_EDGE_RAW;
        if (a.buffer->written) {
            a.buffer->writers.for_each_overlapping(a.region, [&](const IndexedAccess &e) {
                edges.push_back(FoundEdge{e.task, a.arg_index, after_writer});
            });
        }
        if (a.dir == TS_IN) continue;
        a.buffer->index_reads();
        a.buffer->readers.for_each_overlapping(a.region, [&](const IndexedAccess &e) {
            edges.push_back(FoundEdge{e.task, a.arg_index, TS_EDGE_WAR});
        });
    }
    std::sort(edges.begin(), edges.end());
    edges.erase(std::unique(edges.begin(), edges.end()), edges.end());

    for (const Access &a : accesses_) {
        if (a.dir == TS_IN) {
            BufferState &b = *a.buffer;
            if (b.written) {
                b.readers.insert(a.region, task);
            } else {
                ReadNode *node = reads_.allocate(1);
                node->access = IndexedAccess{a.region, task};
                (b.last_read != nullptr ? b.last_read->next : b.first_read) = node;
                b.last_read = node;
            }
        } else {
            a.buffer->index_reads();  // NOTE: this task's own reads of it too, as a write erases them
            a.buffer->written = true;
            a.buffer->writers.erase_covered_by(a.region);
            a.buffer->readers.erase_covered_by(a.region);
            a.buffer->writers.insert(a.region, task);
        }
    }
}

void TensorMap::BufferState::index_reads() {
    for (const ReadNode *r = first_read; r != nullptr; r = r->next) readers.insert(r->access.region, r->access.task);
    first_read = last_read = nullptr;
}

void TensorMap::writers_of(const ts_tensor &t, std::vector<int64_t> &tasks) {
    tasks.clear();
    BufferState &buffer = buffer_for(t);
    const Region region = region_of(t, buffer.layout);
    if (region.empty()) return;
    buffer.writers.for_each_overlapping(region, [&](const IndexedAccess &e) { tasks.push_back(e.task); });
    std::sort(tasks.begin(), tasks.end());
    tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
}

}  // namespace ts::rt
