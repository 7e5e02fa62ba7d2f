/* tilescope runtime core: the C API Python (ctypes) uses to run task graphs.
 *
 * Invariants:
 *  - A ts_runtime owns worker threads that outlive a run: they are started by its first run,
 *    park (sleep, no spinning) between runs and are joined by ts_runtime_destroy. Runs on one
 *    runtime are serialized; each starts from a clean state (no task, tensor map entry, record,
 *    dump tag, intermediate tensor or error of an earlier run is visible to it).
 *  - ts_runtime_run and ts_run never return NULL. When they return, the orchestration has
 *    returned, every submitted task has finished (or was skipped after a failure) and
 *    intermediate tensors are freed; ts_run, which uses a runtime of its own, has also joined
 *    its worker threads.
 *  - A result is immutable; every accessor may be called from any thread until ts_run_free.
 *  - Recorded edges are deterministic for a given submission order: they depend only on the
 *    tasks' arguments and explicit deps, never on how far execution has progressed.
 *  - Times are nanoseconds of the steady clock since the run started.
 */
#ifndef TILESCOPE_RUNTIME_API_H
#define TILESCOPE_RUNTIME_API_H

#include <stdint.h>

#include "tilescope/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The value of every byte of a guard zone (ts_guard_zone, and the zones around intermediates). */
#define TS_GUARD_BYTE 0xFD

/* A program argument allocated with guard zones: `before` bytes just before its buffer (of `bytes`
 * bytes, starting at its ts_tensor::data) and `after` bytes just after it, each TS_GUARD_BYTE.
 * The runtime checks them as it checks the zones of the tensors it allocates. `reach`: bytes of
 * inaccessible address space beyond each zone (0: none known); a fault there is reported as near
 * this argument (the crash report's fault_near). */
typedef struct ts_guard_zone {
    int32_t program_arg;
    int32_t reserved;
    int64_t bytes;
    int64_t before;
    int64_t after;
    int64_t reach;
} ts_guard_zone;

typedef struct ts_run_config {
    /* Each field that turns on an instrument is named as its knob (tilescope/knobs.py); one that
     * several instruments read is named for what it records and says which read it. */
    int32_t num_workers;  /* worker threads; 0 = std::thread::hardware_concurrency() */
    int32_t record_edges; /* nonzero: keep every dependency edge (ts_edge_record), every task
                             argument (ts_task_arg_record) and every buffer (ts_buffer_record;
                             buffers are also kept when dump_level is nonzero). Read by
                             enable_dep_gen, and by enable_trace (flow arrows) when on */
    int32_t record_task_times; /* nonzero: keep per-task records (worker; submit, start and end
                                  times) and task names. Read by enable_trace and enable_dep_gen */
    int32_t dump_level;   /* tensor/scalar dump: 0 off, 1 tagged (dump_tag), 2 every argument,
                             3 every argument, metadata only (no payload). Read by
                             enable_dump_tensor, and by print_intermediates 1 and 2 (level 2) */
    int64_t dump_arena_bytes; /* payload ring per worker (levels 1, 2); 0 = 64 MiB */
    int64_t dump_max_records; /* records kept per worker, later ones are dropped; 0 = 1 << 20 */
    double task_timeout_s;    /* > 0: a task, or the orchestration between two submissions, charged
                                 more is stopped (TS_FAILURE_TIMEOUT): its CPU time plus the time it
                                 was blocked; time waiting for a core is not charged. 0: no budget */
    int32_t serial;           /* nonzero: tasks run one at a time, lowest ready id first, after the
                                 orchestration has returned (a deterministic schedule) */
    int32_t nan_check;        /* nonzero: scan every task's outputs for NaN/Inf (ts_nan_record) */
    int32_t print_intermediates; /* the knob's level; 3: a line on stderr as each task starts and
                                    finishes. Levels 1 and 2 need only a level-2 dump (dump_level) */
    int32_t worker_stack_mib; /* > 0: each worker's stack holds at least this many MiB (a kernel's
                                 tiles live on its worker's stack); workers with smaller stacks are
                                 restarted first. 0: the default thread stack */
    const uint8_t *kernel_filter; /* NULL: every kernel; else one flag per func_id: the lines of
                                     print_intermediates 3 and dump levels 2 and 3 cover the
                                     flagged kernels' tasks only */
    const char *crash_report_path; /* NULL: none; else a fatal signal inside a kernel writes a crash
                                      report there (format: docs/failures.md) before the process dies */
    const ts_guard_zone *guard_zones; /* program arguments allocated with guard zones (may be NULL) */
    int32_t num_guard_zones;
    int32_t probes; /* nonzero: a kernel's ts.probe calls (ts_probe_record) are kept as dump records
                       of stage TS_DUMP_PROBE, with a level-0 dump if dump_level is 0. Read by probes */
    int32_t poison; /* 0: intermediates (create_tensor) start zero-filled; else 0x100 | b: every byte
                       of them starts as b (b & 1 for bool, the only values a bool may hold; the
                       poison runs of tilescope triage and --poison) */
    uint32_t shuffle_seed; /* 0: the usual schedule; else a randomized one from this seed: ready
                              tasks taken in random order, every successor queued (none handed
                              straight to the worker that readied it), random delays before
                              kernels (--shuffle; not serial) */
    int32_t pmu; /* nonzero: per-task counters (ts_pmu_record) around every kernel. Read by enable_pmu */
    int64_t max_tasks; /* > 0: the most tasks a run may submit (the graph's memory grows with each); the
                          submit past it fails the run, and a loop whose trip count passes it fails
                          before it starts. 0: no cap. Read by max_tasks */
} ts_run_config;

/* Why a run failed (ts_failure_record::kind). */
typedef enum ts_failure_kind {
    TS_FAILURE_NONE = 0,
    TS_FAILURE_ERROR = 1,        /* an orchestration or submission error: ts_run_error says which */
    TS_FAILURE_DEADLOCK = 2,     /* tasks remain that can never run: ts_run_copy_waits says on what */
    TS_FAILURE_TIMEOUT = 3,      /* a task or the orchestration used up task_timeout_s and was stopped */
    TS_FAILURE_KERNEL_ERROR = 4, /* a kernel threw (a checked build's bounds check): ts_run_error */
    TS_FAILURE_INTERRUPTED = 5,  /* SIGINT (Ctrl-C) during the run: the running tasks were stopped and
                                    the others not run; ts_run_error names the running ones */
    TS_FAILURE_GUARD = 6         /* a guard zone around a tensor changed: a task wrote outside it;
                                    ts_run_error names the tensor and the task(s) that may have */
} ts_failure_kind;

#define TS_MAX_FRAMES 32

/* What a failure was, finer than its kind, as the place that made it knew it
 * (ts_failure_record::cause): reports read it instead of the message. */
typedef enum ts_failure_cause {
    TS_CAUSE_NONE = 0,   /* nothing more is known than the kind and the message */
    TS_CAUSE_BOUNDS = 1, /* KERNEL_ERROR: a load or store outside its tensor (a checked build), or
                            valid counts outside the tile; op/tensor/where name it when checked */
    TS_CAUSE_REGION = 2  /* ERROR: the orchestration gave a task (func_id, arg_index) a region, or read
                            an element, outside its tensor */
} ts_failure_cause;

/* The first failure of a run. */
typedef struct ts_failure_record {
    int32_t kind;       /* ts_failure_kind */
    int32_t worker;     /* the worker that ran the task; -1: the orchestration thread, or none */
    int64_t task_id;    /* the failing task; -1: the orchestration, or none */
    int32_t func_id;    /* its kernel; -1 if none */
    int32_t nframes;    /* TIMEOUT: return addresses of the stopped thread when it was stopped */
    int64_t elapsed_ns; /* TIMEOUT: the time charged against task_timeout_s: cpu_ns + blocked_ns
                           (wall_ns when cpu_ns is -1) */
    int64_t wall_ns;    /* TIMEOUT: wall time since the watchdog first saw it running */
    int64_t cpu_ns;     /* TIMEOUT: its thread's CPU time over wall_ns; -1: unreadable (wall time
                           was charged) */
    int64_t blocked_ns; /* TIMEOUT: time its thread was blocked (sleeping, a lock, I/O); the rest of
                           wall_ns it waited for a core, which is not charged */
    uint64_t frames[TS_MAX_FRAMES]; /* frames[0] is the interrupted instruction */
    int32_t cause;                  /* ts_failure_cause */
    int32_t arg_index;              /* BOUNDS, REGION: the kernel argument (-1: not known) */
    char op[16];                    /* BOUNDS: the DSL op ("load", "store", "load_rows"; "": unchecked) */
    char tensor[64];                /* BOUNDS: the tensor parameter's DSL name */
    char where[176];                /* BOUNDS: the op's DSL file:line */
} ts_failure_record;

/* One unmet dependency of a task that can never run (TS_FAILURE_DEADLOCK). */
typedef struct ts_wait_record {
    int64_t task;       /* the blocked task */
    int64_t pred;       /* the task it waits for */
    int32_t func_id;    /* task's kernel */
    int32_t pred_func_id; /* pred's kernel; -1 if pred was never submitted */
    int32_t pred_state; /* 0: pred is blocked too; 1: pred was never submitted */
    int32_t kind;       /* ts_edge_kind */
    int32_t source;     /* ts_edge_source */
    int32_t arg_index;  /* task's argument behind the edge; -1 for explicit deps */
    ts_arg arg;         /* that argument as submitted (zeroed for explicit deps) */
} ts_wait_record;

/* A task whose outputs hold NaN/Inf after it completed (nan_check). */
typedef struct ts_nan_record {
    int64_t task_id;
    int32_t func_id;
    int32_t worker;
    int32_t arg_index;   /* the output (or inout) argument */
    int32_t origin;      /* 0: every input was finite (the task made them); 1: input_arg was not */
    int64_t first_index; /* row-major element index, within the argument's region, of the first one */
    int64_t nan_count;
    int64_t inf_count;
    int32_t input_arg;   /* origin 1: the first non-finite input argument; else -1 */
    int32_t reserved;
    int64_t producer;    /* origin 1: the task that last wrote that input; -1: a program input */
} ts_nan_record;

/* ts_dump_record::flags of saved inputs: an inout captured after its kernel had partly run */
#define TS_SAVED_PARTIAL 4

/* Why an edge exists. An INOUT argument after a writer is RAW, after a reader WAR. */
typedef enum ts_edge_kind {
    TS_EDGE_RAW = 0,  /* succ reads what pred wrote */
    TS_EDGE_WAW = 1,  /* succ overwrites what pred wrote */
    TS_EDGE_WAR = 2,  /* succ overwrites what pred read */
    TS_EDGE_ORDER = 3 /* explicit dependency: ordering only, no tensor involved */
} ts_edge_kind;

typedef enum ts_edge_source { TS_EDGE_TENSORMAP = 0, TS_EDGE_EXPLICIT = 1 } ts_edge_source;

typedef struct ts_edge_record {
    int64_t pred;
    int64_t succ;
    int32_t arg_index; /* succ's argument that caused the edge; -1 for explicit edges */
    int32_t kind;      /* ts_edge_kind */
    int32_t source;    /* ts_edge_source */
    int32_t reserved;
} ts_edge_record;

typedef struct ts_task_record {
    int64_t task_id;
    int32_t func_id;
    int32_t worker; /* worker index, or -1 if the task was skipped after a failure */
    int64_t submit_ns;
    int64_t start_ns;
    int64_t end_ns;
} ts_task_record;

/* One executed task's counters (pmu), read on its worker around its kernel: -1 where the counter
 * is unavailable on this machine (ts_run_pmu_note says which and why). */
typedef struct ts_pmu_record {
    int64_t task_id;
    int32_t worker;
    int32_t reserved;
    int64_t wall_ns;
    int64_t cpu_ns;       /* the worker thread's CPU time */
    int64_t page_faults;  /* minor + major */
    int64_t ctx_switches; /* voluntary + involuntary */
    int64_t cycles;
    int64_t instructions;
    int64_t cache_misses;
} ts_pmu_record;

/* One argument of one task, as submitted (recorded with record_edges): with the buffers, it names
 * the regions behind each edge. Records are in submission order, then argument order. */
typedef struct ts_task_arg_record {
    int64_t task_id;
    int32_t arg_index;
    int32_t reserved;
    ts_arg arg; /* kind, dir, and the tensor view (buffer_id, dtype, ndim, shape, strides, offset) or scalar */
} ts_task_arg_record;

/* A buffer the run knows as a whole (recorded with record_edges): each tensor program argument,
 * then each intermediate from create_tensor, in creation order. */
typedef struct ts_buffer_record {
    ts_tensor tensor;    /* the full tensor that defines the buffer's index space */
    int32_t program_arg; /* its program argument index, or -1 for an intermediate */
    int32_t reserved;
} ts_buffer_record;

/* A tensor the orchestration marked with dump_tag: tasks from `first_task` on that touch it are
 * dumped at level 1. */
typedef struct ts_dump_tag_record {
    ts_tensor tensor;
    int64_t first_task;
} ts_dump_tag_record;

/* One orchestration read (ts_orch_api::read) that completed, in program order: element `index` of
 * a view of buffer `buffer_id` (its element `element` of the buffer), its value, and the tasks it
 * waited for: the last of the `next_task` tasks submitted before it that writes the element (the
 * earlier writers are ordered before that one; none: it did not wait), entries
 * [first_wait, first_wait + num_waits) of ts_run_copy_orch_read_waits. Every
 * read is kept (no config field turns it on). */
typedef struct ts_orch_read_record {
    int64_t buffer_id;
    int64_t element;             /* element offset of the element in its buffer */
    int64_t index[TS_MAX_DIMS];  /* in the view read; unused dims 0 */
    int32_t ndim;
    int32_t dtype;               /* ts_dtype, an integer one */
    int64_t value;
    int64_t next_task;           /* the id the next submitted task gets */
    int64_t wait_start_ns;       /* when the read began */
    int64_t wait_end_ns;         /* when the element was read (after the wait) */
    int64_t first_wait;
    int64_t num_waits;
} ts_orch_read_record;

/* When a dump record was taken. */
typedef enum ts_dump_stage {
    TS_DUMP_BEFORE_DISPATCH = 0,
    TS_DUMP_AFTER_COMPLETION = 1,
    TS_DUMP_PROBE = 2 /* a tile a kernel's ts.probe captured while it ran (ts_run_config::probes) */
} ts_dump_stage;

/* ts_dump_record::role of a probe (the others are ts_dir values). A probe's arg_index is its place
 * among its task's probes (execution order), value.v.i the kernel's probe id, shape its tile's. */
#define TS_DUMP_ROLE_PROBE 4

/* ts_dump_record::flags */
#define TS_DUMP_TRUNCATED 1   /* the payload was cut to the arena size; bin_size bytes are kept */
#define TS_DUMP_OVERWRITTEN 2 /* the payload was overwritten by a later one (ring reuse); none kept */

/* One dumped argument of one task (see ts_run_config::dump_level). Inputs, inouts and scalars are
 * taken on the worker just before the kernel runs (TS_DUMP_BEFORE_DISPATCH), outputs and inouts
 * just after it returns (TS_DUMP_AFTER_COMPLETION). A tensor's payload is its region copied
 * contiguous (row-major over shape). Records come sorted by (task_id, stage, arg_index). */
typedef struct ts_dump_record {
    int64_t task_id;
    int32_t func_id;
    int32_t arg_index;
    int32_t role;   /* ts_dir */
    int32_t stage;  /* ts_dump_stage */
    int32_t kind;   /* ts_arg_kind */
    int32_t dtype;  /* ts_dtype */
    int32_t ndim;   /* 0 for scalars; never more than TS_MAX_DIMS */
    int32_t flags;  /* TS_DUMP_TRUNCATED | TS_DUMP_OVERWRITTEN */
    int64_t shape[TS_MAX_DIMS];   /* in elements; unused dims 0 */
    int64_t strides[TS_MAX_DIMS]; /* in elements */
    int64_t start_offset;         /* element offset of the region's first element in its buffer */
    int64_t buffer_id;
    ts_scalar value;    /* scalars only */
    int64_t bin_offset; /* payload offset in ts_run_copy_dump_payload's output, -1 if none */
    int64_t bin_size;   /* payload bytes kept (0: no payload) */
    int32_t worker;
    int32_t reserved;
} ts_dump_record;

typedef struct ts_run_result ts_run_result;
typedef struct ts_runtime ts_runtime;

/* A runtime with `num_workers` workers (<= 0: one per hardware thread); no thread starts until
 * its first run. NULL if out of memory. Not usable in a child process after fork(). */
ts_runtime *ts_runtime_create(int32_t num_workers);
int32_t ts_runtime_num_workers(const ts_runtime *rt); /* as resolved */
/* Run one orchestration to completion on `rt`'s workers; the orchestration runs on the calling
 * thread, concurrently with them. A concurrent call on the same runtime waits for this one.
 * `kernels[func_id]` executes tasks submitted with that func_id; `kernel_names` (may be NULL)
 * name them in errors and records. `args` are the program arguments handed to `orch` (tensor
 * args' buffers are registered for dependency inference). `config` may be NULL (nothing
 * recorded); a nonzero `config->num_workers` must equal the runtime's. */
ts_run_result *ts_runtime_run(ts_runtime *rt, const ts_run_config *config, ts_orch_fn orch,
                              const ts_kernel_fn *kernels, const char *const *kernel_names,
                              int32_t nkernels, const ts_arg *args, int32_t nargs);
/* Wait for a run in progress, then wake and join the workers and free `rt`. */
void ts_runtime_destroy(ts_runtime *rt);

/* ts_runtime_run on a runtime of `config->num_workers` workers created for this run and
 * destroyed before it returns (`config` may be NULL: all hardware threads, nothing recorded). */
ts_run_result *ts_run(const ts_run_config *config, ts_orch_fn orch, const ts_kernel_fn *kernels,
                      const char *const *kernel_names, int32_t nkernels, const ts_arg *args,
                      int32_t nargs);

/* Every count of a finished run in one call (what a binding reads first, to fetch only the records
 * there are): each field equals its ts_run_* function's value. */
typedef struct ts_run_summary {
    int32_t status;        /* ts_run_status */
    int32_t num_workers;   /* ts_run_num_workers */
    int32_t dump_level;    /* ts_run_dump_level */
    int32_t failure_kind;  /* ts_run_failure's kind */
    double wall_seconds;   /* ts_run_wall_seconds */
    int64_t error_bytes;   /* strlen(ts_run_error) */
    int64_t num_tasks;
    int64_t num_dependencies;
    int64_t num_edges;
    int64_t num_task_args;
    int64_t num_buffers;
    int64_t num_dump_tags;
    int64_t num_orch_reads;
    int64_t num_dump_records;
    int64_t num_waits;
    int64_t num_nan;
    int64_t nan_total;
    int64_t num_saved;
    int64_t num_nan_saved;
    int64_t num_pmu;
    int64_t pmu_note_bytes; /* strlen(ts_run_pmu_note) */
} ts_run_summary;
void ts_run_summarize(const ts_run_result *r, ts_run_summary *out);

int32_t ts_run_status(const ts_run_result *r);      /* 0 ok, nonzero failed */
const char *ts_run_error(const ts_run_result *r);   /* "" when ok; valid until ts_run_free */
int64_t ts_run_num_tasks(const ts_run_result *r);   /* tasks submitted */
int64_t ts_run_num_dependencies(const ts_run_result *r); /* distinct (pred, succ) pairs */
int64_t ts_run_num_edges(const ts_run_result *r);   /* edge records (0 unless record_edges) */
int32_t ts_run_num_workers(const ts_run_result *r);
double ts_run_wall_seconds(const ts_run_result *r);
/* Copy up to `capacity` records into `out`; return how many were copied (0 if not recorded). */
int64_t ts_run_copy_tasks(const ts_run_result *r, ts_task_record *out, int64_t capacity);
int64_t ts_run_copy_edges(const ts_run_result *r, ts_edge_record *out, int64_t capacity);
int64_t ts_run_num_pmu(const ts_run_result *r); /* 0 unless pmu; one per executed task, by task id */
int64_t ts_run_copy_pmu(const ts_run_result *r, ts_pmu_record *out, int64_t capacity);
/* pmu: which counters were available and where from, and why the others were not; "" without pmu. */
const char *ts_run_pmu_note(const ts_run_result *r);
int64_t ts_run_num_task_args(const ts_run_result *r); /* 0 unless record_edges */
int64_t ts_run_copy_task_args(const ts_run_result *r, ts_task_arg_record *out, int64_t capacity);
int64_t ts_run_num_buffers(const ts_run_result *r); /* 0 unless record_edges */
int64_t ts_run_copy_buffers(const ts_run_result *r, ts_buffer_record *out, int64_t capacity);
/* Buffer `index`'s name (an intermediate's orchestration variable, given by name_tensor), or "". */
const char *ts_run_buffer_name(const ts_run_result *r, int64_t index);
int64_t ts_run_num_dump_tags(const ts_run_result *r);
int64_t ts_run_copy_dump_tags(const ts_run_result *r, ts_dump_tag_record *out, int64_t capacity);
/* The tensor dump (ts_run_config::dump_level), flushed from every worker after the run, a failed
 * run included. Records are sorted; the payload is every kept payload, concatenated in record
 * order (each at its record's bin_offset). */
int32_t ts_run_dump_level(const ts_run_result *r);
int64_t ts_run_num_dump_records(const ts_run_result *r);
int64_t ts_run_copy_dump_records(const ts_run_result *r, ts_dump_record *out, int64_t capacity);
int64_t ts_run_dump_payload_size(const ts_run_result *r);
/* Copy the payload into `out` if `capacity` holds all of it; returns the bytes copied (0 if not). */
int64_t ts_run_copy_dump_payload(const ts_run_result *r, void *out, int64_t capacity);
int64_t ts_run_dump_dropped(const ts_run_result *r); /* records lost: a worker's record buffer was full */

/* Writing a dump's manifest without per-record work in the caller (tensor_dump_json.cpp). A
 * buffer's display name (JSON-escaped, without quotes) and its layout (ndim -1: none), from which
 * a record's region is found; a probe's name and DSL line (JSON-escaped). */
typedef struct ts_dump_buffer_name {
    int64_t buffer_id;
    const char *name;
    int32_t ndim;
    int32_t reserved;
    int64_t shape[TS_MAX_DIMS];
    int64_t strides[TS_MAX_DIMS];
    int64_t offset;
} ts_dump_buffer_name;

typedef struct ts_dump_probe_name {
    int32_t func_id;
    int32_t probe_id;
    const char *name;
    const char *line; /* "file:line", NULL: none */
} ts_dump_probe_name;

/* counts[stage * 5 + role] (ts_dump_stage, ts_dir / TS_DUMP_ROLE_PROBE), then the truncated and the
 * overwritten records: TS_DUMP_COUNTS values. */
#define TS_DUMP_COUNTS 17
void ts_dump_count_records(const ts_dump_record *records, int64_t n, int64_t *counts);
/* Write `records` to `fd` as the JSON objects of a manifest's "records" list (docs/dump.md), each
 * on its own line after a newline, separated by commas. kernels[func_id] are JSON-escaped without
 * quotes, and so are the names of tasks task_ids[0..ntasks), each followed by a NUL in
 * `task_names` ("": the kernel's name). Returns 0, or the errno of a failed write (ENOMEM: out of
 * memory). */
int32_t ts_dump_write_records_json(int32_t fd, const ts_dump_record *records, int64_t n,
                                   const char *const *kernels, int32_t nkernels, const int64_t *task_ids,
                                   const char *task_names, int64_t ntasks, const ts_dump_buffer_name *buffers,
                                   int32_t nbuffers, const ts_dump_probe_name *probes, int32_t nprobes);

/* The orchestration reads (ts_orch_read_record), their tensor names and source lines ("" if not
 * given), and the task ids they waited for. */
int64_t ts_run_num_orch_reads(const ts_run_result *r);
int64_t ts_run_copy_orch_reads(const ts_run_result *r, ts_orch_read_record *out, int64_t capacity);
const char *ts_run_orch_read_name(const ts_run_result *r, int64_t index);
const char *ts_run_orch_read_where(const ts_run_result *r, int64_t index);
int64_t ts_run_num_orch_read_waits(const ts_run_result *r);
int64_t ts_run_copy_orch_read_waits(const ts_run_result *r, int64_t *out, int64_t capacity);

/* Called by a kernel's ts.probe (through the sink the loader installs into a kernel library that
 * has probes) on the worker running it: keeps `rows` x `cols` elements of `dtype` at `data`
 * (contiguous) as a TS_DUMP_PROBE record of the running task. Does nothing outside a run with
 * probes on. Never throws. */
void ts_probe_record(int32_t probe_id, const void *data, int32_t dtype, int64_t rows, int64_t cols);
/* A task's display name, or NULL if neither tasks nor a dump were recorded or the id is out of range. */
const char *ts_run_task_name(const ts_run_result *r, int64_t task_id);
/* The names of tasks `task_ids` (n), each followed by a NUL ("" for an unknown id), into `out` if
 * `capacity` holds them all; returns the bytes they take. */
int64_t ts_run_copy_task_names(const ts_run_result *r, const int64_t *task_ids, int64_t n, char *out, int64_t capacity);
void ts_run_free(ts_run_result *r);

/* How the run failed; returns the kind (TS_FAILURE_NONE when it did not), filling `out` if not NULL. */
int32_t ts_run_failure(const ts_run_result *r, ts_failure_record *out);
int64_t ts_run_num_waits(const ts_run_result *r); /* TS_FAILURE_DEADLOCK: unmet dependencies */
int64_t ts_run_copy_waits(const ts_run_result *r, ts_wait_record *out, int64_t capacity);
int64_t ts_run_num_nan(const ts_run_result *r);   /* nan_check: records kept (at most 256) */
int64_t ts_run_nan_total(const ts_run_result *r); /* nan_check: tasks with non-finite outputs */
int64_t ts_run_copy_nan(const ts_run_result *r, ts_nan_record *out, int64_t capacity);
/* The inputs of the task worth replaying alone: the timed-out or throwing task. Records as in the
 * dump (stage TS_DUMP_BEFORE_DISPATCH, inputs, inouts and scalars); payload as
 * ts_run_copy_dump_payload. */
int64_t ts_run_saved_task(const ts_run_result *r); /* its id, or -1 */
int64_t ts_run_num_saved(const ts_run_result *r);
int64_t ts_run_copy_saved(const ts_run_result *r, ts_dump_record *out, int64_t capacity);
int64_t ts_run_saved_payload_size(const ts_run_result *r);
int64_t ts_run_copy_saved_payload(const ts_run_result *r, void *out, int64_t capacity);
/* nan_check: the inputs of the tasks that made NaN/Inf from finite inputs (inouts as they were
 * before the kernel), the 64 lowest task ids; records of every task in task id order, each with its
 * task_id, as ts_run_copy_saved; one payload. */
int64_t ts_run_num_nan_saved(const ts_run_result *r);
int64_t ts_run_copy_nan_saved(const ts_run_result *r, ts_dump_record *out, int64_t capacity);
int64_t ts_run_nan_saved_payload_size(const ts_run_result *r);
int64_t ts_run_copy_nan_saved_payload(const ts_run_result *r, void *out, int64_t capacity);

/* An orchestration that submits one task: kernel 0 on every program argument, as given. Runs one
 * task alone (tilescope replay --task). */
int ts_single_task_orchestration(const ts_orch_api *api, void *ctx, const ts_arg *args, int32_t nargs);

/* Layout checks for bindings: TS_ABI_VERSION and sizeof(ts_arg) this core was built with. */
uint32_t ts_core_abi_version(void);
int32_t ts_core_sizeof_arg(void);

#ifdef __cplusplus
}
#endif

#endif /* TILESCOPE_RUNTIME_API_H */
