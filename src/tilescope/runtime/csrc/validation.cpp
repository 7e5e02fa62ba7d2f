#include "validation.hpp"

#include <sstream>

#include "dtype.hpp"

namespace ts::rt {

namespace {

// NOTE: messages are built only on failure; constructing a stream on the per-task happy path
// costs more than the checks themselves.
template <class... Parts>
std::string concat(const Parts &...parts) {
    std::ostringstream out;
    (out << ... << parts);
    return out.str();
}

std::string shape_string(int32_t ndim, const int64_t *shape) {
    std::ostringstream out;
    out << '[';
    for (int32_t d = 0; d < ndim; ++d) out << (d ? ", " : "") << shape[d];
    out << ']';
    return out.str();
}

std::string list_kernels(const std::vector<std::string> &names) {
    constexpr size_t kShown = 8;
    std::ostringstream out;
    for (size_t i = 0; i < names.size() && i < kShown; ++i) out << (i ? ", " : "") << i << " '" << names[i] << "'";
    if (names.size() > kShown) out << ", ...";
    return out.str();
}

}  // namespace

std::string describe_task(const SubmitRequest &req, const std::vector<std::string> &kernel_names) {
    const bool known = req.func_id >= 0 && static_cast<size_t>(req.func_id) < kernel_names.size();
    std::ostringstream out;
    out << "task " << req.task_id;
    if (req.name != nullptr) out << " '" << req.name << "'";
    out << " (func_id " << req.func_id;
    if (known) out << ", kernel '" << kernel_names[static_cast<size_t>(req.func_id)] << "'";
    out << ')';
    return out.str();
}

std::string validate_arg(const ts_arg &arg) {
    if (arg.kind == TS_ARG_SCALAR) {
        if (arg.dir != TS_SCALAR) return concat("scalar argument has direction ", arg.dir, ", expected TS_SCALAR");
        if (!dtype_valid(arg.u.s.dtype)) return concat("scalar dtype code ", arg.u.s.dtype, " is not a ts_dtype");
        return {};
    }
    if (arg.kind != TS_ARG_TENSOR)
        return concat("argument kind ", arg.kind, " is neither TS_ARG_TENSOR nor TS_ARG_SCALAR");
    const ts_tensor &t = arg.u.t;
    if (arg.dir != TS_IN && arg.dir != TS_OUT && arg.dir != TS_INOUT)
        return concat("tensor argument has direction ", arg.dir, ", expected TS_IN, TS_OUT or TS_INOUT");
    if (t.ndim < 1 || t.ndim > TS_MAX_DIMS) return concat("ndim ", t.ndim, " is out of range [1, ", TS_MAX_DIMS, "]");
    if (!dtype_valid(t.dtype)) return concat("tensor dtype code ", t.dtype, " is not a ts_dtype");
    int64_t elements = 1;
    for (int32_t d = 0; d < t.ndim; ++d) {
        if (t.shape[d] < 0)
            return concat("shape ", shape_string(t.ndim, t.shape), " has a negative extent in dim ", d);
        elements *= t.shape[d];
    }
    if (elements > 0 && t.data == nullptr)
        return concat("tensor of shape ", shape_string(t.ndim, t.shape), " has a NULL data pointer");
    return {};
}

std::string validate_submission(const SubmitRequest &req, const std::vector<std::string> &kernel_names) {
    if (req.func_id < 0 || static_cast<size_t>(req.func_id) >= kernel_names.size()) {
        return concat(describe_task(req, kernel_names), ": func_id ", req.func_id, " is out of range: this run has ",
                      kernel_names.size(), " kernel(s) (", list_kernels(kernel_names), ")");
    }
    if (req.nargs < 0 || (req.nargs > 0 && req.args == nullptr))
        return concat(describe_task(req, kernel_names), ": invalid argument list (nargs ", req.nargs, ")");
    for (int32_t i = 0; i < req.nargs; ++i) {
        std::string why = validate_arg(req.args[i]);
        if (!why.empty()) return concat(describe_task(req, kernel_names), ", arg ", i, ": ", why);
    }
    if (req.ndeps < 0 || (req.ndeps > 0 && req.deps == nullptr))
        return concat(describe_task(req, kernel_names), ": invalid dependency list (ndeps ", req.ndeps, ")");
    for (int32_t i = 0; i < req.ndeps; ++i) {
        if (req.deps[i] < 0)
            return concat(describe_task(req, kernel_names), ": explicit dependency ", i, " names task ", req.deps[i],
                          "; task ids are >= 0");
        if (req.deps[i] == req.task_id)
            return concat(describe_task(req, kernel_names), ": explicit dependency ", i,
                          " names the task itself: a task cannot wait for itself (a dependency cycle)");
    }
    return {};
}

std::string validate_new_tensor(int32_t dtype, int32_t ndim, const int64_t *shape) {
    if (!dtype_valid(dtype)) return concat("dtype code ", dtype, " is not a ts_dtype");
    if (ndim < 1 || ndim > TS_MAX_DIMS || shape == nullptr)
        return concat("ndim ", ndim, " is out of range [1, ", TS_MAX_DIMS, "]");
    // NOTE: bound the byte size well below INT64_MAX so offsets and byte ranges cannot overflow.
    constexpr int64_t kMaxBytes = int64_t{1} << 48;
    int64_t bytes = dtype_itemsize(dtype);
    for (int32_t d = 0; d < ndim; ++d) {
        if (shape[d] < 0 || (shape[d] > 0 && bytes > kMaxBytes / shape[d]))
            return concat("shape ", shape_string(ndim, shape), " is negative or too large");
        bytes *= shape[d];
    }
    return {};
}

}  // namespace ts::rt
