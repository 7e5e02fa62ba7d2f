// A bump allocator of stable, contiguous arrays, for per-run objects freed all at once.
//
// Invariants: an allocated array never moves and lives until the arena is destroyed; only one
// thread allocates (the orchestration thread), any thread may use what it was handed. Blocks
// double from `first_block` up to `max_block` elements, so a small run touches little memory
// (a large first block costs page faults on every run) and a large one few allocations. With a
// BlockCache, blocks come from it and go back to it when the arena is destroyed (the runtime's
// memory kept between runs); every element is value-initialized either way. An allocation that
// throws (out of memory) leaves the arena as it was.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

#include "block_cache.hpp"

namespace ts::rt {

template <class T>
class BlockArena {
    static_assert(alignof(T) <= static_cast<size_t>(BlockCache::kAlign), "blocks are 64-byte aligned");

public:
    BlockArena(size_t first_block, size_t max_block, BlockCache *cache = nullptr)
        : next_block_(first_block), max_block_(max_block), cache_(cache) {}
    BlockArena(const BlockArena &) = delete;
    BlockArena &operator=(const BlockArena &) = delete;
    ~BlockArena() {
        for (const Block &b : blocks_) {
            std::destroy_n(b.data, b.count);
            release(b.data, b.bytes);
        }
    }

    // `n` value-initialized, contiguous elements.
    T *allocate(size_t n) {
        if (used_ + n > capacity_) {
            const size_t count = std::max(next_block_, n);
            if (blocks_.size() == blocks_.capacity()) blocks_.reserve(std::max<size_t>(8, 2 * blocks_.size()));
            size_t bytes = count * sizeof(T);
            void *raw = cache_ != nullptr ? cache_->take(bytes) : ::operator new(bytes, BlockCache::kAlign);
            T *data = static_cast<T *>(raw);
            try {
                std::uninitialized_value_construct_n(data, count);
            } catch (...) {
                release(raw, bytes);
                throw;
            }
            blocks_.push_back(Block{data, count, bytes});  // NOTE: cannot throw: capacity reserved above
            capacity_ = count;
            next_block_ = std::min(next_block_ * 2, max_block_);
            used_ = 0;
        }
        T *out = blocks_.back().data + used_;
        used_ += n;
        return out;
    }

private:
    struct Block {
        T *data;
        size_t count;
        size_t bytes;  // the block's size (a kept block may be larger than count elements)
    };

    void release(void *raw, size_t bytes) noexcept {
        if (cache_ != nullptr)
            cache_->give(raw, bytes);
        else
            ::operator delete(raw, bytes, BlockCache::kAlign);
    }

    size_t next_block_;
    const size_t max_block_;
    BlockCache *const cache_;
    size_t capacity_ = 0;
    size_t used_ = 0;
    std::vector<Block> blocks_;
};

}  // namespace ts::rt
