// The tensor map: dependency inference from task arguments.
//
// Invariants:
//  - Per buffer (ts_tensor::buffer_id) it holds the regions written (OUT/INOUT) and read (IN) by
//    submitted tasks, except entries fully covered by a later write. Such an entry is ordered
//    before that write (by a WAW or WAR edge), and any later access conflicting with it also
//    conflicts with the write, so its edges are implied transitively.
//  - A task's edges are found against the map as it stood before the task, so a task never
//    depends on itself, and they depend only on the submission order (never on execution).
//  - Rules, per argument of the new task: IN gets RAW edges from overlapping writers; OUT gets
//    WAW from overlapping writers and WAR from overlapping readers; INOUT gets RAW from
//    overlapping writers and WAR from overlapping readers. Overlap is true box intersection
//    (see region.hpp).
//  - An orchestration read of an element waits for the writers overlapping it (writers_of): every
//    task that wrote the element and was not covered by a later write, which it is ordered
//    before, so when they have finished the element holds its last value. A read is not an
//    access: every task submitted after it is submitted after it completed.
//  - The regions read in a buffer that no task has written yet are kept in a list, in submission
//    order, and go into the readers' index only before the buffer's first write (which is the
//    first access that looks for readers): a program input no task writes is never indexed, and
//    the index holds, whenever it is read, what it would hold had every read gone in at once.
//  - Used by the orchestration thread only.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "block_arena.hpp"
#include "region.hpp"
#include "region_index.hpp"
#include "tilescope/abi.h"
#include "tilescope/runtime_api.h"

namespace ts::rt {

struct FoundEdge {
    int64_t pred;
    int32_t arg_index;  // the new task's argument
    int32_t kind;       // ts_edge_kind

    bool operator<(const FoundEdge &o) const {
        if (pred != o.pred) return pred < o.pred;
        if (arg_index != o.arg_index) return arg_index < o.arg_index;
        return kind < o.kind;
    }
    bool operator==(const FoundEdge &o) const {
        return pred == o.pred && arg_index == o.arg_index && kind == o.kind;
    }
};

class TensorMap {
public:
    // The map's index nodes come from `pool`, its list of reads not indexed yet from blocks of
    // `blocks` (both must outlive it).
    TensorMap(NodePool &pool, BlockCache &blocks) : pool_(&pool), reads_(64, 4096, &blocks) {}

    // Fix the layout of `t`'s buffer from the full tensor `t`, unless the buffer is known already.
    void register_buffer(const ts_tensor &t);

    // Find the edges task `task` needs (sorted by pred, arg, kind; no duplicates) into `edges`,
    // then record its accesses. Args must be validated (see validation.hpp).
    void add_task(int64_t task, const ts_arg *args, int32_t nargs, std::vector<FoundEdge> &edges);

    // The tasks whose written regions (OUT/INOUT) overlap the view `t`, ascending, into `tasks`:
    // what an orchestration read of `t` waits for. Records nothing.
    void writers_of(const ts_tensor &t, std::vector<int64_t> &tasks);

private:
    struct ReadNode {  // a read not in its buffer's `readers` yet (see the invariants)
        IndexedAccess access;
        ReadNode *next;
    };
    struct BufferState {
        explicit BufferState(NodePool *pool) : writers(*pool), readers(*pool) {}
        BufferLayout layout;
        RegionIndex writers;
        RegionIndex readers;
        ReadNode *first_read = nullptr;  // the reads not indexed yet, in submission order
        ReadNode *last_read = nullptr;
        bool written = false;  // some task has written the buffer

        // Put the reads not indexed yet into `readers`, in their order (before a write).
        void index_reads();
    };
    struct Access {
        BufferState *buffer;
        Region region;
        int32_t arg_index;
        int32_t dir;
    };

    BufferState &buffer_for(const ts_tensor &t);

    NodePool *pool_;
    BlockArena<ReadNode> reads_;  // the ReadNodes of every buffer (kept until the run ends)
    std::unordered_map<int64_t, BufferState> buffers_;
    std::vector<Access> accesses_;  // scratch, reused across tasks
};

}  // namespace ts::rt
