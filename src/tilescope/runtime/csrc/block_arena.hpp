// A bump allocator of stable, contiguous arrays, for per-run objects freed all at once.
//
// Invariants: an allocated array never moves and lives until the arena is destroyed; only one
// thread allocates (the orchestration thread), any thread may use what it was handed. Blocks
// double from `first_block` up to `max_block` elements, so a small run touches little memory
// (a large first block costs page faults on every run) and a large one few allocations. With a
// BlockCache, blocks come from it and go back to it when the arena is destroyed (the runtime's
// memory kept between runs); every element is value-initialized either way.
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
public:
    BlockArena(size_t first_block, size_t max_block, BlockCache *cache = nullptr)
        : next_block_(first_block), max_block_(max_block), cache_(cache) {}
    BlockArena(const BlockArena &) = delete;
    BlockArena &operator=(const BlockArena &) = delete;
    ~BlockArena() {
        for (const Block &b : blocks_) {
            std::destroy_n(b.data, b.count);
            if (cache_ != nullptr)
                cache_->give(b.data, b.count * sizeof(T));
            else
                ::operator delete(b.data, b.count * sizeof(T), BlockCache::kAlign);
        }
    }

    // `n` value-initialized, contiguous elements.
    T *allocate(size_t n) {
        if (used_ + n > capacity_) {
            capacity_ = std::max(next_block_, n);
            next_block_ = std::min(next_block_ * 2, max_block_);
            blocks_.reserve(blocks_.size() + 1);  // NOTE: before the block, so a throw here leaks nothing
            const size_t bytes = capacity_ * sizeof(T);
            void *raw = cache_ != nullptr ? cache_->take(bytes) : ::operator new(bytes, BlockCache::kAlign);
            T *data = static_cast<T *>(raw);
            std::uninitialized_value_construct_n(data, capacity_);
            blocks_.push_back(Block{data, capacity_});
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
    };
    size_t next_block_;
    const size_t max_block_;
    BlockCache *const cache_;
    size_t capacity_ = 0;
    size_t used_ = 0;
    std::vector<Block> blocks_;
};

}  // namespace ts::rt
