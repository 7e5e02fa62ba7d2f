// A bump allocator of stable, contiguous arrays, for per-run objects freed all at once.
//
// Invariants: an allocated array never moves and lives until the arena is destroyed; only one
// thread allocates (the orchestration thread), any thread may use what it was handed.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace ts::rt {

template <class T>
class BlockArena {
public:
    explicit BlockArena(size_t block_size) : block_size_(block_size) {}

    // `n` value-initialized, contiguous elements.
    T *allocate(size_t n) {
        if (used_ + n > capacity_) {
            capacity_ = std::max(block_size_, n);
            blocks_.push_back(std::make_unique<T[]>(capacity_));
            used_ = 0;
        }
        T *out = blocks_.back().get() + used_;
        used_ += n;
        return out;
    }

private:
    size_t block_size_;
    size_t capacity_ = 0;
    size_t used_ = 0;
    std::vector<std::unique_ptr<T[]>> blocks_;
};

}  // namespace ts::rt
