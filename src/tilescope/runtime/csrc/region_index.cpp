#include "region_index.hpp"

#include <algorithm>
#include <iterator>

namespace ts::rt {

void RegionIndex::insert(const Region &region, int64_t task) {
    const int32_t log2_span = 63 - __builtin_clzll(static_cast<unsigned long long>(region.span()));
    auto it = std::lower_bound(classes_.begin(), classes_.end(), log2_span,
                               [](const SpanClass &c, int32_t v) { return c.log2_span < v; });
    if (it == classes_.end() || it->log2_span != log2_span) {
        it = classes_.insert(it, SpanClass(pool_));
        it->log2_span = log2_span;
    }
    it->max_span = std::max(it->max_span, region.span());
    max_hi_ = std::max(max_hi_, region.hi);
    // NOTE: after equal keys (insertion order); a region at or past the last key (a graph that
    // walks a buffer forward) goes in at the end in constant time
    if (!it->entries.empty() && region.lo >= std::prev(it->entries.end())->first)
        it->entries.emplace_hint(it->entries.end(), region.lo, IndexedAccess{region, task});
    else
        it->entries.emplace(region.lo, IndexedAccess{region, task});
}

void RegionIndex::erase_covered_by(const Region &writer) {
    // NOTE: an entry `writer` covers lies within [writer.lo, writer.hi), and every entry ends by max_hi_
    if (writer.lo >= max_hi_) return;
    for (SpanClass &c : classes_) {
        auto it = c.entries.lower_bound(writer.lo - c.max_span + 1);
        while (it != c.entries.end() && it->first < writer.hi) {
            if (covers(writer, it->second.region))
                it = c.entries.erase(it);
            else
                ++it;
        }
    }
}

}  // namespace ts::rt
