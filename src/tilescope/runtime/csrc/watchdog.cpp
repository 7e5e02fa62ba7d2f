// The scheduler's watchdog thread: it samples the threads running user code and stops what ran
// past the run's budget (see scheduler.hpp's invariants).
#include "scheduler.hpp"

#include <vector>

namespace ts::rt {

void Scheduler::watchdog_main() {
    std::vector<ChargeMeter> meters;
    std::vector<uint64_t> fired;
    std::unique_lock<std::mutex> lock(wd_mu_);
    for (;;) {
        wd_cv_.wait(lock, [&] { return wd_stop_ || wd_run_; });
        if (wd_stop_) return;
        meters.assign(static_cast<size_t>(num_workers_) + 1, ChargeMeter{});
        fired.assign(meters.size(), 0);
        wd_polling_ = true;
        // NOTE: polls go on across back-to-back runs (a meter follows its slot's seq, so a run's
        // user code is never charged to another's); two polls in a row with no run in progress park it
        for (bool idle = false; !wd_stop_;) {
            wd_cv_.wait_for(lock, wd_poll_);
            if (wd_stop_) break;
            if (!wd_run_) {
                if (idle) break;
                idle = true;
                continue;
            }
            idle = false;
            watch(meters, fired);
        }
        wd_polling_ = false;
    }
}

void Scheduler::watch(std::vector<ChargeMeter> &meters, std::vector<uint64_t> &fired) {
    const Clock::time_point now = Clock::now();
    for (int32_t i = 0; i <= num_workers_; ++i) {
        ThreadSlot &slot = i < num_workers_ ? states_[i].slot : orch_slot_;
        ChargeMeter &meter = meters[static_cast<size_t>(i)];
        const uint64_t seq = slot.seq.load(std::memory_order_acquire);
        if ((seq & 1) == 0) continue;  // no user code runs
        if (seq != meter.seq()) {      // user code that started since the last poll
            meter.start(seq, now, slot.clock);
            continue;
        }
        meter.poll(now, slot.clock);
        if (meter.charge().charged_ns() < context_.timeout_ns) continue;
        if (fired[static_cast<size_t>(i)] != seq) {
            fired[static_cast<size_t>(i)] = seq;
            const Task *task = slot.task;
            if (slot.seq.load(std::memory_order_acquire) != seq) continue;  // it moved on meanwhile
            context_.hooks->timed_out(i < num_workers_ ? task : nullptr, slot.worker, meter.charge());
        }
        request_stop(slot, seq);  // NOTE: again at every poll until it stops (a signal may come early)
    }
}

}  // namespace ts::rt
