// A bump allocator of stable, contiguous arrays, for per-run objects freed all at once.
//
// Invariants: an allocated array never moves and lives until the arena is destroyed; only one
// thread allocates (the orchestration thread), any thread may use what it was handed. Blocks
// double from `first_block` up to `max_block` elements, so a small run touches little memory
// (a large first block costs page faults on every run) and a large one few allocations.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace ts::rt {

template <class T>
class BlockArena {
public:
    BlockArena(size_t first_block, size_t max_block) : next_block_(first_block), max_block_(max_block) {}

    // `n` value-initialized, contiguous elements.
    T *allocate(size_t n) {
        if (used_ + n > capacity_) {
            capacity_ = std::max(next_block_, n);
            next_block_ = std::min(next_block_ * 2, max_block_);
            blocks_.push_back(std::make_unique<T[]>(capacity_));
            used_ = 0;
        }
        T *out = blocks_.back().get() + used_;
        used_ += n;
        return out;
    }

private:
    size_t next_block_;
    const size_t max_block_;
    size_t capacity_ = 0;
    size_t used_ = 0;
    std::vector<std::unique_ptr<T[]>> blocks_;
};

}  // namespace ts::rt
