// An ordered index of the regions accessed in one buffer, for fast overlap queries.
//
// Invariants:
//  - Entries are grouped in span classes (class c holds spans in [2^c, 2^(c+1))); each class is
//    ordered by start byte and knows the largest span it has ever held. A query for [lo, hi)
//    visits, per class, only entries starting in (lo - max_span, hi): no other entry can reach it.
//    A 100k-wide fan-out of disjoint slices therefore costs O(log n) per query, and one huge
//    region does not slow down queries among small ones.
//  - The index knows a bound past every entry's end (max_hi_, never lowered): a query or a
//    covering write that starts there finds nothing without a search, and a region inserted
//    at or past the last start of its class goes in at the end; so a graph that walks a buffer
//    forward (a fan-out writing slice after slice) costs O(1) per task.
//  - Iteration order is deterministic (class, then start byte, then insertion order).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "node_pool.hpp"
#include "region.hpp"

namespace ts::rt {

struct IndexedAccess {
    Region region;
    int64_t task;
};

class RegionIndex {
public:
    // The index's nodes come from `pool` (which must outlive it).
    explicit RegionIndex(NodePool &pool) : pool_(&pool) {}

    void insert(const Region &region, int64_t task);

    // Call f(const IndexedAccess &) for every entry overlapping `query`.
    template <class F>
    void for_each_overlapping(const Region &query, F &&f) const {
        if (query.lo >= max_hi_) return;  // past every entry: a new region appended at the end
        for (const SpanClass &c : classes_) {
            for (auto it = c.entries.lower_bound(query.lo - c.max_span + 1);
                 it != c.entries.end() && it->first < query.hi; ++it) {
                if (overlaps(it->second.region, query)) f(it->second);
            }
        }
    }

    // Remove every entry that `writer` covers (see covers()).
    void erase_covered_by(const Region &writer);

private:
    using Entries = std::multimap<int64_t, IndexedAccess, std::less<int64_t>,
                                  PoolAllocator<std::pair<const int64_t, IndexedAccess>>>;
    struct SpanClass {
        explicit SpanClass(NodePool *pool) : entries(PoolAllocator<std::pair<const int64_t, IndexedAccess>>(pool)) {}
        int32_t log2_span = 0;
        int64_t max_span = 0;
        Entries entries;  // keyed by region.lo
    };
    NodePool *pool_;
    std::vector<SpanClass> classes_;  // sorted by log2_span
    int64_t max_hi_ = INT64_MIN;       // >= every entry's hi (never lowered by an erase)
};

}  // namespace ts::rt
