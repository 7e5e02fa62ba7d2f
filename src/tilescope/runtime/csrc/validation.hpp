// Checks on what an orchestration submits, before anything reaches the tensor map or a kernel.
//
// Invariant: each function returns "" when its input is well-formed, else one message that names
// the task (id, name, func_id and kernel), the argument index and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tilescope/abi.h"

namespace ts::rt {

struct SubmitRequest {
    int64_t task_id;  // the id the task gets if it is accepted
    int32_t func_id;
    const ts_arg *args;
    int32_t nargs;
    const int64_t *deps;
    int32_t ndeps;
    const char *name;  // may be NULL
};

// "task 3 'rms_rows' (func_id 0, kernel 'rms_rows')"
std::string describe_task(const SubmitRequest &req, const std::vector<std::string> &kernel_names);

std::string validate_submission(const SubmitRequest &req, const std::vector<std::string> &kernel_names);

// A tensor argument or a scalar argument (program arguments and task arguments alike).
std::string validate_arg(const ts_arg &arg);

// A shape an intermediate tensor may have.
std::string validate_new_tensor(int32_t dtype, int32_t ndim, const int64_t *shape);

}  // namespace ts::rt
