// tilescope orchestration API: what orchestration code (generated or hand-written) uses to
// create tensors, cut them into regions and submit tasks.
//
//   ts::Orchestrator orch(api, ctx, args, nargs);
//   ts::TensorHandle x = orch.tensor_arg(0);
//   ts::Task t = orch.task(0, "rms_rows");
//   t.add_input(x.slice({{r, r + 64}, {0, 512}}), {64, 512});
//   int64_t id = orch.submit(t);
//   const int32_t n = orch.read<int32_t>(counts, {e}, "counts", "moe.py:41");  // waits for its writers
//   return orch.status();
//
// Invariants:
//  - A TensorHandle is a strided view of one buffer; slicing keeps the buffer's strides, so the
//    runtime can compare regions of one buffer as boxes.
//  - Misuse (a slice outside the tensor, a region whose shape differs from the kernel parameter's,
//    a program argument of the wrong kind) is reported once through api->fail with the task, the
//    argument index, the region and the shapes involved. From then on the orchestrator is failed:
//    every add_*, create_tensor, submit and read is a no-op, submit returns -1, read returns 0 and
//    status() is nonzero. A failed read (reported by the runtime) fails it the same way.
//  - An out-of-bounds slice (or a squeeze of a dim whose extent is not 1) yields an invalid handle
//    whose error is reported where the handle is used: an add_* call knows the task and argument
//    index, slice() alone does not.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tilescope/abi.h"

namespace ts {

// A step-1 range [start, stop) of one dimension.
struct Range {
    int64_t start;
    int64_t stop;
};

class Orchestrator;
class Task;

namespace detail {

inline bool is_float_dtype(int32_t dtype) {
    return dtype == TS_F32 || dtype == TS_F16 || dtype == TS_BF16 || dtype == TS_F64;
}

inline bool is_valid_dtype(int32_t dtype) { return dtype >= TS_F32 && dtype <= TS_I64; }

inline void write_shape(std::ostream &out, const int64_t *shape, int32_t ndim) {
    out << '[';
    for (int32_t d = 0; d < ndim; ++d) out << (d ? ", " : "") << shape[d];
    out << ']';
}

template <class Ints>
void write_list(std::ostream &out, const Ints &values) {
    out << '[';
    bool first = true;
    for (int64_t v : values) {
        out << (first ? "" : ", ") << v;
        first = false;
    }
    out << ']';
}

}  // namespace detail

// A view of a program argument or an intermediate tensor, possibly sliced and squeezed.
class TensorHandle {
public:
    TensorHandle() = default;

    int32_t ndim() const { return t_.ndim; }
    int64_t shape(int32_t dim) const { return dim >= 0 && dim < t_.ndim ? t_.shape[dim] : 0; }
    const ts_tensor &desc() const { return t_; }
    // False for a default-constructed handle or the result of an invalid slice/squeeze.
    bool valid() const { return root_kind_ != Root::none && error_.empty(); }

    // The sub-view [start, stop) along every dim (one range per dim, step 1).
    TensorHandle slice(std::initializer_list<Range> ranges) const {
        if (!valid()) return *this;
        if (static_cast<int32_t>(ranges.size()) != t_.ndim) {
            std::ostringstream why;
            why << "it has " << ranges.size() << " range(s) but the tensor has " << t_.ndim << " dim(s)";
            return invalid_slice(ranges, why.str());
        }
        TensorHandle out = *this;
        int32_t d = 0;
        for (const Range &r : ranges) {
            if (r.start < 0 || r.stop < r.start || r.stop > t_.shape[d]) {
                std::ostringstream why;
                why << "dim " << d << " range [" << r.start << ", " << r.stop << ") is not within [0, " << t_.shape[d]
                    << ")";
                return invalid_slice(ranges, why.str());
            }
            const int32_t root_dim = dim_map_[d];
            out.t_.offset += r.start * t_.strides[d];
            out.t_.shape[d] = r.stop - r.start;
            out.root_lo_[root_dim] = root_lo_[root_dim] + r.start;
            out.root_hi_[root_dim] = root_lo_[root_dim] + r.stop;
            ++d;
        }
        return out;
    }

    // The view without the listed dims, each of which must have extent 1 (an integer index).
    TensorHandle squeeze(std::initializer_list<int32_t> dims) const {
        if (!valid()) return *this;
        bool drop[TS_MAX_DIMS] = {};
        for (int32_t d : dims) {
            if (d < 0 || d >= t_.ndim || drop[d] || t_.shape[d] != 1) {
                std::ostringstream why;
                why << "cannot squeeze dim " << d << " of " << describe() << " (shape ";
                detail::write_shape(why, t_.shape, t_.ndim);
                why << "): only distinct dims of extent 1 can be dropped";
                return invalid(why.str());
            }
            drop[d] = true;
        }
        if (static_cast<int32_t>(dims.size()) == t_.ndim) {
            return invalid("squeezing every dim of " + describe() + " would leave a tensor with no dims");
        }
        TensorHandle out = *this;
        int32_t kept = 0;
        for (int32_t d = 0; d < t_.ndim; ++d) {
            if (drop[d]) continue;
            out.t_.shape[kept] = t_.shape[d];
            out.t_.strides[kept] = t_.strides[d];
            out.dim_map_[kept] = dim_map_[d];
            ++kept;
        }
        for (int32_t d = kept; d < TS_MAX_DIMS; ++d) out.t_.shape[d] = out.t_.strides[d] = 0;
        out.t_.ndim = kept;
        return out;
    }

    // "x[0:64, 0:512]" (or "tensor_arg(0)[0:64, 0:512]" for an unnamed parameter): the root
    // tensor and this view's box in it.
    std::string describe() const {
        std::ostringstream out;
        switch (root_kind_) {
            case Root::none: return "an empty TensorHandle";
            case Root::argument:
                if (root_name_ != nullptr)
                    out << root_name_;
                else
                    out << "tensor_arg(" << root_index_ << ')';
                break;
            case Root::intermediate: out << "intermediate tensor #" << root_index_; break;
        }
        out << '[';
        for (int32_t d = 0; d < root_ndim_; ++d) out << (d ? ", " : "") << root_lo_[d] << ':' << root_hi_[d];
        out << ']';
        return out.str();
    }

private:
    friend class Orchestrator;
    friend class Task;
    enum class Root : int32_t { none, argument, intermediate };

    TensorHandle(const ts_tensor &t, Root kind, int32_t index)
        : t_(t), root_kind_(kind), root_index_(index), root_ndim_(t.ndim) {
        for (int32_t d = 0; d < t.ndim; ++d) {
            root_hi_[d] = t.shape[d];
            dim_map_[d] = d;
        }
    }

    TensorHandle invalid(std::string why) const {
        TensorHandle out = *this;
        out.error_ = std::move(why);
        return out;
    }

    TensorHandle invalid_slice(std::initializer_list<Range> ranges, const std::string &why) const {
        std::ostringstream msg;
        msg << "slice [";
        bool first = true;
        for (const Range &r : ranges) {
            msg << (first ? "" : ", ") << r.start << ':' << r.stop;
            first = false;
        }
        msg << "] of " << describe() << " (shape ";
        detail::write_shape(msg, t_.shape, t_.ndim);
        msg << ") is out of bounds: " << why;
        TensorHandle out = invalid(msg.str());
        out.outside_ = true;
        return out;
    }

    ts_tensor t_{};
    Root root_kind_ = Root::none;
    int32_t root_index_ = -1;
    const char *root_name_ = nullptr;  // the program parameter's name (a string literal), if given
    int32_t root_ndim_ = 0;
    int64_t root_lo_[TS_MAX_DIMS] = {};  // this view's box in the root tensor
    int64_t root_hi_[TS_MAX_DIMS] = {};
    int32_t dim_map_[TS_MAX_DIMS] = {};  // root dim of each view dim
    std::string error_;                  // why the handle is invalid
    bool outside_ = false;               // invalid because a slice left the tensor
};

// One task being assembled: a kernel (func_id), its arguments in parameter order, explicit deps.
class Task {
public:
    void add_input(const TensorHandle &t, std::initializer_list<int64_t> expected_shape) {
        add_tensor(TS_IN, t, expected_shape);
    }
    void add_output(const TensorHandle &t, std::initializer_list<int64_t> expected_shape) {
        add_tensor(TS_OUT, t, expected_shape);
    }
    void add_inout(const TensorHandle &t, std::initializer_list<int64_t> expected_shape) {
        add_tensor(TS_INOUT, t, expected_shape);
    }

    // A scalar argument; stored as double for floating dtypes and as int64 otherwise. `value` may be
    // any type convertible to double (numbers, ts::bf16, ts::f16).
    template <class T>
    void add_scalar(int32_t dtype, T value);

    void depends_on(int64_t task_id) { deps_.push_back(task_id); }

    int32_t func_id() const { return func_id_; }
    const std::string &name() const { return name_; }

private:
    friend class Orchestrator;
    Task(Orchestrator *orch, int32_t func_id, std::string name, const char *where)
        : orch_(orch), func_id_(func_id), name_(std::move(name)), where_(where) {
        args_.reserve(8);
    }

    void add_tensor(int32_t dir, const TensorHandle &t, std::initializer_list<int64_t> expected_shape);
    std::string describe_arg(int32_t dir) const;

    Orchestrator *orch_;
    int32_t func_id_;
    std::string name_;
    const char *where_;  // the call's DSL line ("moe.py:41"), a string literal; may be null
    std::vector<ts_arg> args_;
    std::vector<int64_t> deps_;
};

// The orchestration's view of the runtime for one run.
class Orchestrator {
public:
    Orchestrator(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs)
        : api_(api), ctx_(ctx), args_(args), nargs_(nargs) {
        if (api_->abi_version != TS_ABI_VERSION) {
            std::ostringstream msg;
            msg << "orchestration built for tilescope ABI " << TS_ABI_VERSION << " but the runtime speaks ABI "
                << api_->abi_version << "; rebuild the program";
            fail(msg.str());
        }
    }

    // Program parameter `index`, which must be a tensor.
    // `name` (a string literal, or null) is what messages call it: the program parameter's name.
    TensorHandle tensor_arg(int32_t index, const char *name = nullptr) {
        if (!check_arg(index, TS_ARG_TENSOR, "tensor_arg")) return TensorHandle();
        TensorHandle out(args_[index].u.t, TensorHandle::Root::argument, index);
        out.root_name_ = name;
        return out;
    }

    // Program parameter `index`, which must be a scalar, converted to T (an arithmetic type or an
    // element type such as ts::bf16 that is constructible from a number).
    template <class T>
    T scalar_arg(int32_t index) {
        static_assert(std::is_constructible<T, double>::value && std::is_constructible<T, int64_t>::value,
                      "scalar_arg<T>: T must be constructible from double and int64_t");
        if (!check_arg(index, TS_ARG_SCALAR, "scalar_arg")) return static_cast<T>(0.0);
        const ts_scalar &s = args_[index].u.s;
        return detail::is_float_dtype(s.dtype) ? static_cast<T>(s.v.f) : static_cast<T>(s.v.i);
    }

    // A zero-filled, contiguous intermediate tensor that lives until the run ends; `name` (the
    // orchestration's variable, may be NULL) names it in reports.
    TensorHandle create_tensor(int32_t dtype, std::initializer_list<int64_t> shape, const char *name = nullptr) {
        if (failed_) return TensorHandle();
        ts_tensor t{};
        const int32_t ndim = static_cast<int32_t>(shape.size());
        if (api_->create_tensor(ctx_, dtype, ndim, shape.begin(), &t) != 0) {
            failed_ = true;  // the runtime has recorded why
            return TensorHandle();
        }
        if (name != nullptr) api_->name_tensor(ctx_, &t, name);
        return TensorHandle(t, TensorHandle::Root::intermediate, num_intermediates_++);
    }

    // `where`: the call's DSL line ("moe.py:41"), named when a region it gives is out of bounds
    Task task(int32_t func_id, std::string name, const char *where = nullptr) {
        return Task(this, func_id, std::move(name), where);
    }

    // Submit `task`; returns its id, or -1 once the orchestration has failed.
    int64_t submit(const Task &task) {
        if (failed_) return -1;
        const int64_t id = api_->submit(ctx_, task.func_id_, task.args_.data(), static_cast<int32_t>(task.args_.size()),
                                        task.deps_.data(), static_cast<int32_t>(task.deps_.size()), task.name_.c_str());
        if (id < 0) {
            failed_ = true;  // the runtime has recorded why
            return -1;
        }
        next_task_id_ = id + 1;
        return id;
    }

    // An orchestration read: element `index` of `t` (an i32, i64, i8 or u8 tensor), once every task
    // submitted so far that writes it has finished, converted to T. `name` names the tensor and
    // `where` the source line ("moe.py:41") in the run's records and errors (either may be NULL).
    // After a failed read (an index outside `t`, an Out of the program no submitted task writes,
    // a task it waits for that can never run, the run failing meanwhile) the orchestrator is
    // failed and 0 is returned.
    template <class T>
    T read(const TensorHandle &t, std::initializer_list<int64_t> index, const char *name, const char *where) {
        static_assert(std::is_integral<T>::value, "read<T>: T must be an integer type");
        if (failed_) return T(0);
        if (!t.valid()) {
            std::string what = std::string("read of ") + (name != nullptr ? name : "a tensor");
            if (where != nullptr) what += std::string(" at ") + where;
            fail(what + ": " + (t.error_.empty() ? t.describe() + " is not a tensor" : t.error_));
            return T(0);
        }
        int64_t value = 0;
        if (api_->read == nullptr || api_->read(ctx_, &t.t_, index.begin(), static_cast<int32_t>(index.size()), name,
                                                where, &value) != 0) {
            if (api_->read == nullptr) fail("read: this runtime has no orchestration reads; rebuild the program");
            failed_ = true;  // the runtime has recorded why
            return T(0);
        }
        return static_cast<T>(value);
    }

    // Mark `t` for level-1 tensor dumps in every later task that touches it.
    void dump_tag(const TensorHandle &t) {
        if (failed_) return;
        if (!t.valid()) {
            fail("dump_tag: " + (t.error_.empty() ? t.describe() + " is not a tensor" : t.error_));
            return;
        }
        api_->dump_tag(ctx_, &t.t_);
    }

    // Mark `t` for level-1 tensor dumps in the next submitted task only (`dumps=[t]`).
    void dump_in_next_task(const TensorHandle &t) {
        if (failed_) return;
        if (!t.valid()) {
            fail("dumps=: " + (t.error_.empty() ? t.describe() + " is not a tensor" : t.error_));
            return;
        }
        api_->dump_in_next_task(ctx_, &t.t_);
    }

    // Record a fatal error; the run fails with `message`.
    void fail(const std::string &message) {
        if (failed_) return;
        failed_ = true;
        api_->fail(ctx_, message.c_str());
    }

    // Record the fatal error of a region outside its tensor given to argument `arg_index` of a
    // task of kernel `func_id` by the call at `where` (may be null); the run fails with `message`.
    void fail_region(int32_t func_id, int32_t arg_index, const char *where, const std::string &message) {
        if (failed_) return;
        failed_ = true;
        api_->fail_region_at(ctx_, func_id, arg_index, where, message.c_str());
    }

    bool failed() const { return failed_; }

    // Before a loop that submits tasks: fails the run when its trip count passes the run's
    // max_tasks (the graph would outgrow memory). `what` names the loop and its line
    // ("ts.range(0, c) at m.py:12"); the message adds its bounds' values. Returns whether the loop
    // may run.
    bool loop_fits(int64_t start, int64_t stop, int64_t step, const char *what) {
        if (failed_) return false;
        const int64_t cap = api_->max_tasks != nullptr ? api_->max_tasks(ctx_) : 0;
        if (cap <= 0 || step <= 0 || stop <= start) return true;
        const uint64_t span = static_cast<uint64_t>(stop) - static_cast<uint64_t>(start);  // no overflow
        const uint64_t trips = (span - 1) / static_cast<uint64_t>(step) + 1;
        if (trips <= static_cast<uint64_t>(cap)) return true;
        fail(std::string(what) + " (start " + std::to_string(start) + ", stop " + std::to_string(stop) + ", step " +
             std::to_string(step) + ") runs " + std::to_string(trips) +
             " times, each submitting tasks: more than max_tasks = " +
             std::to_string(cap) + " (TILESCOPE_MAX_TASKS), the most a run may hold; a bound read as a huge "
             "value? (raise max_tasks if the program means it)");
        return false;
    }
    int status() const { return failed_ ? 1 : 0; }
    // The id the next successful submit will get.
    int64_t next_task_id() const { return next_task_id_; }

private:
    bool check_arg(int32_t index, int32_t kind, const char *what) {
        if (failed_) return false;
        const bool exists = index >= 0 && index < nargs_;
        if (exists && args_[index].kind == kind) return true;
        std::ostringstream msg;
        msg << what << '(' << index << "): ";
        if (!exists)
            msg << "the program has " << nargs_ << " argument(s)";
        else
            msg << "program argument " << index << " is a " << (kind == TS_ARG_TENSOR ? "scalar" : "tensor")
                << ", not a " << (kind == TS_ARG_TENSOR ? "tensor" : "scalar");
        fail(msg.str());
        return false;
    }

    const ts_orch_api *api_;
    void *ctx_;
    const ts_arg *args_;
    int32_t nargs_;
    bool failed_ = false;
    int32_t num_intermediates_ = 0;
    int64_t next_task_id_ = 0;
};

inline std::string Task::describe_arg(int32_t dir) const {
    static const char *const kDirNames[] = {"input", "output", "inout", "scalar"};
    std::ostringstream out;
    out << "task " << orch_->next_task_id() << " '" << name_ << "' (func_id " << func_id_ << "), arg "
        << args_.size() << " (" << kDirNames[dir] << ")";
    return out.str();
}

inline void Task::add_tensor(int32_t dir, const TensorHandle &t, std::initializer_list<int64_t> expected_shape) {
    if (orch_->failed()) return;
    if (!t.valid()) {
        const std::string why = describe_arg(dir) + ": " + (t.error_.empty() ? t.describe() + " is not a tensor" : t.error_);
        if (t.outside_) {
            orch_->fail_region(func_id_, static_cast<int32_t>(args_.size()), where_, why);
        } else {
            orch_->fail(why);
        }
        return;
    }
    bool match = static_cast<int32_t>(expected_shape.size()) == t.t_.ndim;
    for (int32_t d = 0; match && d < t.t_.ndim; ++d) match = expected_shape.begin()[d] == t.t_.shape[d];
    if (!match) {
        std::ostringstream msg;
        msg << describe_arg(dir) << ": region " << t.describe() << " has shape ";
        detail::write_shape(msg, t.t_.shape, t.t_.ndim);
        msg << ", but the kernel parameter expects ";
        detail::write_list(msg, expected_shape);
        orch_->fail(msg.str());
        return;
    }
    ts_arg arg{};
    arg.kind = TS_ARG_TENSOR;
    arg.dir = dir;
    arg.u.t = t.t_;
    args_.push_back(arg);
}

template <class T>
void Task::add_scalar(int32_t dtype, T value) {
    static_assert(std::is_convertible<T, double>::value, "add_scalar: the value must be convertible to double");
    if (orch_->failed()) return;
    if (!detail::is_valid_dtype(dtype)) {
        std::ostringstream msg;
        msg << describe_arg(TS_SCALAR) << ": dtype code " << dtype << " is not a ts_dtype";
        orch_->fail(msg.str());
        return;
    }
    ts_arg arg{};
    arg.kind = TS_ARG_SCALAR;
    arg.dir = TS_SCALAR;
    arg.u.s.dtype = dtype;
    if (detail::is_float_dtype(dtype))
        arg.u.s.v.f = static_cast<double>(value);
    else
        arg.u.s.v.i = static_cast<int64_t>(value);
    args_.push_back(arg);
}

}  // namespace ts
