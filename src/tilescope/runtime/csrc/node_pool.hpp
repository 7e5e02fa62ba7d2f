// Nodes of the tensor map's ordered indexes (region_index.hpp), recycled: a run's map nodes go
// back to the pool when the run ends and the next run takes them again, instead of one malloc
// and one free per recorded access (a 100k-task fan-out records 100k of them).
//
// Invariants:
//  - The pool serves one node size (the first it is asked for); other sizes, and nodes past
//    kKeptBytes, go to the global allocator. Every kept node is freed when the pool is destroyed.
//  - Not thread-safe: used by one run's orchestration thread at a time (the tensor map's), and
//    by the thread that destroys the run.
#pragma once

#include <cstddef>
#include <new>

namespace ts::rt {

class NodePool {
public:
    static constexpr size_t kKeptBytes = size_t{32} << 20;

    NodePool() = default;
    NodePool(const NodePool &) = delete;
    NodePool &operator=(const NodePool &) = delete;
    ~NodePool() {
        while (free_ != nullptr) {
            Free *next = free_->next;
            ::operator delete(free_, node_bytes_);
            free_ = next;
        }
    }

    void *take(size_t bytes) {
        if (node_bytes_ == 0 && bytes >= sizeof(Free)) node_bytes_ = bytes;
        if (bytes == node_bytes_ && free_ != nullptr) {
            Free *node = free_;
            free_ = node->next;
            kept_bytes_ -= bytes;
            return node;
        }
        return ::operator new(bytes);
    }

    void give(void *p, size_t bytes) {
        if (bytes != node_bytes_ || kept_bytes_ + bytes > kKeptBytes) {
            ::operator delete(p, bytes);
            return;
        }
        free_ = ::new (p) Free{free_};
        kept_bytes_ += bytes;
    }

    // The bytes kept now (at most kKeptBytes).
    size_t kept_bytes() const { return kept_bytes_; }

private:
    struct Free {
        Free *next;
    };
    Free *free_ = nullptr;
    size_t node_bytes_ = 0;
    size_t kept_bytes_ = 0;
};

// A std allocator drawing single nodes from a NodePool (arrays from the global allocator).
template <class T>
struct PoolAllocator {
    using value_type = T;

    NodePool *pool;

    explicit PoolAllocator(NodePool *p) noexcept : pool(p) {}
    template <class U>
    PoolAllocator(const PoolAllocator<U> &other) noexcept : pool(other.pool) {}  // NOLINT: rebinding

    T *allocate(size_t n) {
        return static_cast<T *>(n == 1 ? pool->take(sizeof(T)) : ::operator new(n * sizeof(T)));
    }
    void deallocate(T *p, size_t n) noexcept {
        if (n == 1)
            pool->give(p, sizeof(T));
        else
            ::operator delete(p, n * sizeof(T));
    }
    template <class U>
    bool operator==(const PoolAllocator<U> &other) const noexcept {
        return pool == other.pool;
    }
    template <class U>
    bool operator!=(const PoolAllocator<U> &other) const noexcept {
        return pool != other.pool;
    }
};

}  // namespace ts::rt
