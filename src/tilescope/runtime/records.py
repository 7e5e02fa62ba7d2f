"""What a sim run reports back: plain records converted from the core's C structs.

Invariants: records are plain Python values (no ctypes objects, no pointers into the core) and
can be pickled; task ids, func ids and argument indices are the runtime's own; times are
nanoseconds since the run started. One exception until they are read: a plain run's
``BufferRecords`` keeps the core's run result (``collect.RunResult``) alive to copy them out of
on first read (``collect``'s invariants).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np


@dataclass(frozen=True, slots=True)
class FailureInfo:
    """How a run failed: ``kind`` is ``error``, ``deadlock``, ``timeout``, ``kernel_error``,
    ``interrupted`` or ``guard`` (a task wrote outside a tensor: a guard zone changed);
    ``task_id``/``func_id``/``worker`` are -1 where they do not apply (the orchestration).
    ``frames`` are the stopped thread's return addresses (timeouts; ``frames[0]`` the pc).
    Timeouts: ``elapsed_ns`` is the time charged against ``task_timeout_s``, ``cpu_ns`` +
    ``blocked_ns`` (or ``wall_ns`` when ``cpu_ns`` is -1: the CPU time could not be read); the
    rest of ``wall_ns`` the thread waited for a core, which is not charged."""

    kind: str
    task_id: int
    func_id: int
    worker: int
    elapsed_ns: int
    wall_ns: int
    cpu_ns: int
    blocked_ns: int
    frames: tuple[int, ...]
    cause: str = ""  # "bounds" or "region" (FAILURE_CAUSES), "" when nothing more is known
    arg_index: int = -1  # bounds, region: the kernel argument
    op: str = ""  # bounds: the DSL op of a checked build ("load", "store", "load_rows")
    tensor: str = ""  # bounds: the tensor parameter's DSL name
    where: str = ""  # bounds: the op's DSL file:line


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """An unmet dependency of a task that can never run (a deadlock): ``task`` waits for
    ``pred``, which is blocked too or was never submitted (``pred_func_id`` -1). ``kind``/``source``
    as in EdgeRecord; ``arg`` is task's argument behind a tensor-map edge (None for explicit deps)."""

    task: int
    pred: int
    func_id: int
    pred_func_id: int
    never_submitted: bool
    kind: str
    source: str
    arg: TaskArgRecord | None


@dataclass(frozen=True, slots=True)
class NanRecord:
    """A task whose output argument ``arg_index`` holds NaN/Inf after it ran. ``fresh``: all its
    inputs were finite (the task made them); otherwise ``input_arg`` was not, last written by
    task ``producer`` (-1: a program input). ``first_index`` is row-major within the region."""

    task_id: int
    func_id: int
    worker: int
    arg_index: int
    fresh: bool
    first_index: int
    nan_count: int
    inf_count: int
    input_arg: int
    producer: int


@dataclass
class SavedInputs:
    """The arguments of a task worth replaying alone (see ``ts_run_saved_task`` and
    ``ts_run_copy_nan_saved``): records as in the dump (stage before_dispatch; outputs without
    payload), their ``bin_offset`` into ``payload``."""

    task_id: int
    records: list[DumpRecord]
    payload: np.ndarray  # uint8
    partial_args: tuple[int, ...]  # inouts captured after the kernel had partly run


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task's timing (nanoseconds since the run started, steady clock). ``worker`` is -1
    (and the times 0) for a task skipped after a failure."""

    task_id: int
    func_id: int
    name: str
    worker: int
    submit_ns: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True, slots=True)
class PmuRecord:
    """One executed task's counters (``enable_pmu``), read on its worker around its kernel: wall
    and CPU time in nanoseconds, page faults, context switches; the hardware counters are None
    where the machine does not expose them (``RunReport.pmu_note`` says which and why)."""

    task_id: int
    worker: int
    wall_ns: int
    cpu_ns: int
    page_faults: int
    ctx_switches: int
    cycles: int | None
    instructions: int | None
    cache_misses: int | None


@dataclass(frozen=True, slots=True)
class EdgeRecord:
    """A dependency ``pred -> succ``. ``arg`` is succ's argument index (-1 for explicit edges);
    ``kind`` is RAW, WAW, WAR or ORDER (explicit); ``source`` is ``tensormap`` or ``explicit``."""

    pred: int
    succ: int
    arg: int
    kind: str
    source: str


@dataclass(frozen=True, slots=True)
class TaskArgRecord:
    """One argument of one task as submitted (recorded with ``record_edges``). ``kind`` is
    ``tensor`` or ``scalar``; ``direction`` ``in``, ``out``, ``inout`` or ``scalar``. A tensor is a
    view of buffer ``buffer_id`` (``shape``/``strides``/``offset`` in elements, ``value`` None);
    a scalar has ``value`` and no buffer (``buffer_id`` 0, empty shape)."""

    task_id: int
    arg_index: int
    kind: str
    direction: str
    dtype: str
    buffer_id: int = 0
    ndim: int = 0
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    offset: int = 0
    value: float | int | None = None


@dataclass(frozen=True, slots=True)
class BufferRecord:
    """A buffer the run knows as a whole (recorded with ``record_edges``): a tensor program
    argument (``program_arg`` its index) or an intermediate from ``create_tensor`` (-1), with
    ``name`` the orchestration's variable for it ("" if the orchestration did not name it)."""

    buffer_id: int
    program_arg: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    name: str = ""


class BufferRecords(Sequence[BufferRecord]):
    """A run's buffer records, made by ``load`` on first read: most runs never read them (a
    failure's diagnosis, the dependency graph and the analyses do), and a small program's run
    should not pay for making them."""

    def __init__(self, load: Callable[[], list[BufferRecord]]) -> None:
        self._load: Callable[[], list[BufferRecord]] | None = load
        self._records: list[BufferRecord] = []

    def _decoded(self) -> list[BufferRecord]:
        load = self._load  # NOTE: read once: another thread may be loading too (both get the same records)
        if load is not None:
            self._records = load()
            self._load = None  # NOTE: after the records: a reader that sees None finds them set
        return self._records

    def __getitem__(self, index):  # type: ignore[override]
        return self._decoded()[index]

    def __len__(self) -> int:
        return len(self._decoded())

    def __iter__(self) -> Iterator[BufferRecord]:
        return iter(self._decoded())

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return repr(self._decoded())

    def __reduce__(self):  # pickled as the plain list it stands for
        return (list, (self._decoded(),))


@dataclass(frozen=True, slots=True)
class DumpTagRecord:
    """A tensor region the orchestration marked with ``dump_tag``, effective from ``first_task``."""

    first_task: int
    buffer_id: int
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class OrchReadRecord:
    """One orchestration read (``n = counts[e]``), in program order: element ``index`` of tensor
    ``name`` (the orchestration's variable; element ``element`` of buffer ``buffer_id``) read at
    ``where`` (``moe.py:41``), its ``value``, the task it ``waited_for`` (the last task submitted
    before it that writes the element, its producer; empty: it did not wait), when it began (``wait_start_ns``)
    and read the element (``wait_end_ns``), and ``next_task``, the id of the next task submitted
    after it (the number submitted before it)."""

    name: str
    where: str
    index: tuple[int, ...]
    dtype: str
    value: int
    waited_for: tuple[int, ...]
    wait_start_ns: int
    wait_end_ns: int
    next_task: int
    buffer_id: int
    element: int

    @property
    def label(self) -> str:
        """``counts[3] = 17``."""
        return f"{self.name or 'tensor'}[{', '.join(map(str, self.index))}] = {self.value}"


@dataclass(frozen=True, slots=True)
class DumpRecord:
    """One dumped argument of one task, or one probe. ``stage`` is ``before_dispatch`` (inputs,
    inouts, scalars), ``after_completion`` (outputs, inouts) or ``probe``; ``role`` is ``input``,
    ``output``, ``inout``, ``scalar`` or ``probe``. A probe's ``arg_index`` is its place among
    the task's probes (execution order), ``value`` the kernel's probe id (``KERNELS[..]["probes"]``),
    ``shape`` its tile's. A tensor's payload is ``payload[bin_offset:bin_offset + bin_size]``
    of its DumpReport (``bin_offset`` None: no payload kept); a scalar has ``value``."""

    task_id: int
    func_id: int
    arg_index: int
    role: str
    stage: str
    kind: str
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    start_offset: int
    buffer_id: int
    value: float | int | bool | None
    bin_offset: int | None
    bin_size: int
    truncated: bool
    overwritten: bool
    worker: int


@dataclass
class DumpReport:
    """The tensor dump of one run (flushed from every worker, a failed run included): records
    sorted by (task_id, stage, arg_index) and their payloads, concatenated in record order.
    ``raw`` holds the records as the core's ``ts_dump_record`` array; ``records`` decodes them
    (with ``decode``) on first use."""

    level: int
    raw: np.ndarray  # uint8: ts_dump_record[n]
    payload: np.ndarray  # uint8
    dropped_records: int
    task_names: dict[int, str]
    decode: Callable[[np.ndarray], list[DumpRecord]] = field(repr=False)

    @cached_property
    def records(self) -> list[DumpRecord]:
        """The records, decoded from ``raw``."""
        return self.decode(self.raw)


@dataclass
class RunReport:
    """What one sim run reports: its status and error, counts, and every record the core kept."""

    status: int
    error: str
    wall_s: float
    num_tasks: int
    num_workers: int
    num_dependencies: int  # distinct (pred, succ) pairs the scheduler enforced
    tasks: list[TaskRecord] = field(default_factory=list)  # with record_task_times
    edges: list[EdgeRecord] = field(default_factory=list)  # with record_edges
    pmu: list[PmuRecord] = field(default_factory=list)  # with pmu: one per executed task, by task id
    pmu_note: str = ""  # with pmu: the counters available, where from, and why others are not
    task_args: list[TaskArgRecord] = field(default_factory=list)  # with record_edges
    buffers: Sequence[BufferRecord] = field(default_factory=list)  # every tensor argument, and intermediates
    dump_tags: list[DumpTagRecord] = field(default_factory=list)
    reads: list[OrchReadRecord] = field(default_factory=list)  # every orchestration read
    dump: DumpReport | None = None  # with dump_level 1..3
    failure: FailureInfo | None = None  # None when the run did not fail
    waits: list[WaitRecord] = field(default_factory=list)  # deadlocks
    nan: list[NanRecord] = field(default_factory=list)  # nan_check (at most 256)
    nan_total: int = 0  # nan_check: tasks whose outputs held NaN/Inf
    saved: SavedInputs | None = None
    # nan_check: the inputs of the tasks that made NaN/Inf from finite inputs (at most 64, the
    # lowest task ids), in task id order
    nan_saved: list[SavedInputs] = field(default_factory=list)
