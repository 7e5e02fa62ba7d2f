// Run::OrchestrationCall: what every ts_orch_api callback does first (graph_run.cpp, orch_read.cpp).
#pragma once

#include <csignal>

#include "graph_run.hpp"

namespace ts::rt {

// Marks the orchestration thread as inside the runtime (not stoppable) for one callback, and
// counts the callback as progress for the watchdog.
class Run::OrchestrationCall {
public:
    explicit OrchestrationCall(Run *run) : slot_(run->scheduler_.orch_slot()), armed_(slot_.armed) {
        slot_.armed = 0;
        if (armed_) slot_.seq.fetch_add(1, std::memory_order_release);  // even: in the runtime
    }
    ~OrchestrationCall() {
        if (armed_) slot_.seq.fetch_add(1, std::memory_order_release);  // odd: orchestration code again
        slot_.armed = armed_;
    }
    OrchestrationCall(const OrchestrationCall &) = delete;
    OrchestrationCall &operator=(const OrchestrationCall &) = delete;

private:
    ThreadSlot &slot_;
    const sig_atomic_t armed_;
};

}  // namespace ts::rt
