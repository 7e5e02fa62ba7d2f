// The instruments of a run that act around every task's kernel, one observer each, and the list
// of those a run has on.
//
// Invariants:
//  - A run builds its TaskObservers once, from its config, before its first task, and changes
//    them no more until it has ended; only instruments that are on are in the list. With every
//    instrument off the list holds the guard zones' check alone (always on).
//  - The worker that runs task `t` calls every observer's before(t, worker) in list order just
//    before the kernel, and every after(t, worker) in reverse order just after it returned (or
//    threw, or was stopped): the last observer in the list brackets the kernel most tightly. A
//    task skipped after a failure calls neither.
//  - Workers call observers concurrently, each with its own `worker` index and a task no other
//    worker touches: per-worker state needs no lock, state shared between workers does.
//  - The Run owns its observers, which outlive every call; the scheduler only borrows the list.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "task.hpp"

namespace ts::rt {

class TaskObserver {
public:
    virtual ~TaskObserver() = default;
    // On the worker that runs `t`, just before its kernel runs.
    virtual void before(Task &t, int32_t worker) = 0;
    // On the same worker, just after the kernel returned, threw or was stopped.
    virtual void after(Task &t, int32_t worker) = 0;
};

class TaskObservers {
public:
    // One per instrument: guard zones, tensor dump, nan check, task lines, pmu, task times.
    static constexpr int32_t kCapacity = 6;

    void add(TaskObserver *observer) {
        if (size_ == kCapacity) throw std::length_error("more task observers than TaskObservers::kCapacity");
        list_[size_++] = observer;
    }

    void before(Task &t, int32_t worker) const {
        for (int32_t i = 0; i < size_; ++i) list_[i]->before(t, worker);
    }
    void after(Task &t, int32_t worker) const {
        for (int32_t i = size_ - 1; i >= 0; --i) list_[i]->after(t, worker);
    }

private:
    TaskObserver *list_[kCapacity] = {};
    int32_t size_ = 0;
};

}  // namespace ts::rt
