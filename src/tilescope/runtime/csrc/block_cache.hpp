// Memory blocks a runtime keeps between its runs: a run's arenas (block_arena.hpp) take their
// blocks here and give them back when the run ends, so the next run of a similar graph reuses
// memory it already touched instead of faulting fresh pages in (for a 100k-task run, a fifth of
// the orchestration thread's time went to page faults and unmapping).
//
// Invariants:
//  - A block is 64-byte aligned and at least as large as asked; a kept block is handed out again
//    only for a request it fits at most twice over (a small arena never pins a large block).
//    take() says how large the block it hands out is, and give() is told that size back.
//  - At most kKeptBytes are kept; a block given back beyond that is freed, and so is one the
//    cache cannot record (give() never throws: it runs in destructors). Every kept block is
//    freed when the cache is destroyed.
//  - Not thread-safe: one run at a time uses it (Runtime::run holds its lock), from the threads
//    that allocate arena blocks and destroy the run, one after the other.
#pragma once

#include <cstddef>
#include <map>
#include <new>

namespace ts::rt {

class BlockCache {
public:
    static constexpr size_t kKeptBytes = size_t{64} << 20;
    static constexpr std::align_val_t kAlign{64};

    BlockCache() = default;
    BlockCache(const BlockCache &) = delete;
    BlockCache &operator=(const BlockCache &) = delete;
    ~BlockCache() {
        for (auto &[bytes, block] : kept_) ::operator delete(block, bytes, kAlign);
    }

    // A block of at least `bytes` bytes: a kept one that fits, else new memory. `bytes` becomes
    // the block's size, which give() must be told.
    void *take(size_t &bytes) {
        const auto it = kept_.lower_bound(bytes);
        if (it != kept_.end() && it->first <= 2 * bytes) {
            void *block = it->second;
            bytes = it->first;
            kept_bytes_ -= bytes;
            kept_.erase(it);
            return block;
        }
        return ::operator new(bytes, kAlign);
    }

    // Gives back a block of `bytes` bytes that take() handed out.
    void give(void *block, size_t bytes) noexcept {
        if (kept_bytes_ + bytes <= kKeptBytes) {
            try {
                kept_.emplace(bytes, block);
                kept_bytes_ += bytes;
                return;
            } catch (...) {  // NOTE: no memory to record it in: free it instead
            }
        }
        ::operator delete(block, bytes, kAlign);
    }

    // The bytes kept now (at most kKeptBytes).
    size_t kept_bytes() const { return kept_bytes_; }

private:
    std::multimap<size_t, void *> kept_;  // by size
    size_t kept_bytes_ = 0;
};

}  // namespace ts::rt
