// What a runtime keeps between its runs for the next one: the blocks of a run's arenas, the
// tensor map's index nodes and the storage of its task list (block_cache.hpp, node_pool.hpp),
// so a large graph run again faults no fresh pages in and mallocs nothing per task.
//
// Invariants: memory only, never state: whatever a run takes from it is zeroed (arena
// elements), empty (the task list) or constructed afresh (map nodes) before the run uses it.
// Each part is bounded (kKeptBytes of blocks and of nodes, kKeptTaskBytes of task list).
#pragma once

#include <cstddef>
#include <vector>

#include "block_cache.hpp"
#include "node_pool.hpp"

namespace ts::rt {

struct Task;

struct RunMemory {
    static constexpr size_t kKeptTaskBytes = size_t{16} << 20;  // a 2M-task run's list

    BlockCache blocks;
    NodePool map_nodes;         // the tensor map's index nodes
    std::vector<Task *> tasks;  // empty; its capacity is a recent run's
};

}  // namespace ts::rt
