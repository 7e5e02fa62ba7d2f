/* tilescope kernel / orchestration / runtime ABI (C, stable within a build version).
 *
 * Invariants:
 *  - Every tensor argument is a view of one buffer: element (i0..in) lives at
 *    data + (offset + sum(ik * strides[k])) * itemsize. Strides are in elements.
 *  - Two views overlap only if they share buffer_id; regions are compared as boxes in
 *    the buffer's index space, so dependency inference is exact for slices.
 *  - Kernels receive args in parameter order: tensors and scalars interleaved exactly
 *    as the kernel's signature lists them.
 */
#ifndef TILESCOPE_ABI_H
#define TILESCOPE_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_ABI_VERSION 2
#define TS_MAX_DIMS 8

typedef enum ts_dtype {
    TS_F32 = 0,
    TS_F16 = 1,
    TS_BF16 = 2,
    TS_I32 = 3,
    TS_I8 = 4,
    TS_U8 = 5,
    TS_BOOL = 6,
    TS_F64 = 7,
    TS_I64 = 8,
} ts_dtype;

typedef enum ts_arg_kind { TS_ARG_TENSOR = 0, TS_ARG_SCALAR = 1 } ts_arg_kind;

/* Direction of an argument, as in kernel_config.py signatures (D.IN/D.OUT/D.INOUT/D.SCALAR). */
typedef enum ts_dir { TS_IN = 0, TS_OUT = 1, TS_INOUT = 2, TS_SCALAR = 3 } ts_dir;

typedef struct ts_tensor {
    void *data;         /* base pointer of the buffer (offset not applied) */
    int64_t buffer_id;  /* identity of the underlying buffer for dependency inference */
    int32_t dtype;      /* ts_dtype */
    int32_t ndim;       /* 1..TS_MAX_DIMS */
    int64_t shape[TS_MAX_DIMS];
    int64_t strides[TS_MAX_DIMS]; /* in elements */
    int64_t offset;               /* in elements, from data */
} ts_tensor;

typedef struct ts_scalar {
    int32_t dtype; /* ts_dtype */
    int32_t reserved;
    union {
        double f;  /* floating dtypes */
        int64_t i; /* integer / bool dtypes */
    } v;
} ts_scalar;

typedef struct ts_arg {
    int32_t kind; /* ts_arg_kind */
    int32_t dir;  /* ts_dir */
    union {
        ts_tensor t;
        ts_scalar s;
    } u;
} ts_arg;

/* Every kernel .so exports this symbol. */
typedef void (*ts_kernel_fn)(const ts_arg *args);

/* Services the runtime offers an orchestration while it runs. `ctx` is opaque. */
typedef struct ts_orch_api {
    uint32_t abi_version;
    /* Allocate an intermediate tensor (contiguous, zero-filled, freed after the run).
     * Returns 0 on success and fills *out. */
    int (*create_tensor)(void *ctx, int32_t dtype, int32_t ndim, const int64_t *shape, ts_tensor *out);
    /* Submit one task. Returns its task id (>= 0) or -1 after recording an error.
     * deps: explicit predecessor task ids. name: display name (may be NULL). */
    int64_t (*submit)(void *ctx, int32_t func_id, const ts_arg *args, int32_t nargs,
                      const int64_t *deps, int32_t ndeps, const char *name);
    /* Mark a tensor for partial (level 1) dumps in every later task touching it. */
    void (*dump_tag)(void *ctx, const ts_tensor *t);
    /* Record a fatal orchestration error (e.g. a region out of bounds); the run fails. */
    void (*fail)(void *ctx, const char *message);
    /* Mark a tensor for partial (level 1) dumps in the next submitted task only (its
     * arguments on that tensor's buffer): ts.submit(..., dumps=[t]). */
    void (*dump_in_next_task)(void *ctx, const ts_tensor *t);
    /* Name the intermediate tensor `t` (as create_tensor returned it) for reports: the
     * orchestration's variable. Added last, so orchestrations built before it still work. */
    void (*name_tensor)(void *ctx, const ts_tensor *t, const char *name);
    /* An orchestration read: element `index` (t->ndim entries, in the view `t`) of an integer
     * tensor, stored in *value once every task submitted so far that writes the element has
     * finished. `name` (the orchestration's variable) and `where` ("moe.py:41") name the read in
     * records and errors; either may be NULL. Returns 0, or nonzero after recording an error (an
     * index outside the view, an Out of the program that no submitted task writes, a task it
     * waits for that can never run, or the run failing while it waits). Added after name_tensor. */
    int (*read)(void *ctx, const ts_tensor *t, const int64_t *index, int32_t nindex, const char *name,
                const char *where, int64_t *value);
    /* Record the fatal error of a region outside its tensor, given to argument `arg_index` of a
     * task of kernel `func_id` being built; the run fails. Added after read. */
    void (*fail_region)(void *ctx, int32_t func_id, int32_t arg_index, const char *message);
    /* fail_region, with `where` ("moe.py:41", may be NULL): the DSL line of the call that gave the
     * region. Added after fail_region. */
    void (*fail_region_at)(void *ctx, int32_t func_id, int32_t arg_index, const char *where, const char *message);
    /* The most tasks this run may submit (0: no cap): a loop that submits tasks checks its trip
     * count against it before it starts. Added after fail_region_at. */
    int64_t (*max_tasks)(void *ctx);
} ts_orch_api;

/* Every orchestration .so exports this symbol. Returns 0 on success. */
typedef int (*ts_orch_fn)(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs);

#ifdef __cplusplus
}
#endif

#endif /* TILESCOPE_ABI_H */
