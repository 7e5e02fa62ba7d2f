"""What the machine's memory allows a run: a build's local memory against the workers' stacks and
the physical memory (refused before any thread starts, naming the knob, the value, the limit and
what to do), the core's config fields that ctypes would cut short, and memory mapped read-only."""

from __future__ import annotations

import mmap
import os
import warnings

import numpy as np
import pytest
import torch

from tilescope import knobs
from tilescope.errors import ConfigError
from tilescope.runtime import host_memory
from tilescope.runtime.host_memory import check_local_memory, unwritable, worker_stack_mib
from tilescope.runtime.run_config import Recording, RunConfig, core_config

GIB = 1 << 30


def test_default_stacks_are_never_refused(monkeypatch):
    monkeypatch.setattr(host_memory, "physical_memory_bytes", lambda: 1 << 20)  # 1 MiB: nothing fits
    check_local_memory(256 << 10, knobs.MAX_WORKERS, "p")  # the default local memory keeps the default stacks


def test_workers_whose_stacks_pass_the_physical_memory_are_refused_naming_what_to_do(monkeypatch):
    monkeypatch.setattr(host_memory, "physical_memory_bytes", lambda: 16 * GIB)
    check_local_memory(GIB, 7, "p")  # 7 stacks of 2 GiB + 4 MiB fit in 16 GiB
    with pytest.raises(ConfigError) as info:
        check_local_memory(GIB, 16, "p")
    assert str(info.value) == (
        "local_memory_bytes=1073741824 (1 GiB) of build p: each of the 16 worker(s) reserves a stack of 2.004 GiB (twice "
        "the local memory, plus 4 MiB), 32.06 GiB in all, more than this machine's 16 GiB of physical memory: compile "
        "with a smaller compile_cfg local_memory_bytes (at most 534773760, 510 MiB, for 16 worker(s); "
        "report/summary.txt lists each kernel's peak), or run with at most 7 worker(s) (num_workers=, --workers)")
    with pytest.raises(ConfigError, match=r"of build p: each of the 1 worker\(s\) reserves a stack of 2 TiB .* "
                                          r"\(at most 8587837440, 7\.998 GiB, for 1 worker\(s\); .*\): not even one "
                                          r"worker's stack fits$"):  # fmt: skip
        check_local_memory(1 << 40, 1, "p")


def test_local_memory_past_what_the_core_gives_is_refused_whatever_the_machine(monkeypatch):
    monkeypatch.setattr(host_memory, "physical_memory_bytes", lambda: None)  # a system that does not say
    check_local_memory(knobs.MAX_LOCAL_MEMORY_BYTES, 4, "p")
    with pytest.raises(ConfigError) as info:
        check_local_memory(2**62, 1, "p")
    assert str(info.value) == (
        "local_memory_bytes=4611686018427387904 (4.194e+06 TiB) of build p: more than the 1 TiB the runtime can give "
        "a worker (its tiles live on a stack twice that size): compile again with compile_cfg local_memory_bytes <= "
        "1099511627776")


def test_the_physical_memory_is_the_machines():
    physical = host_memory.physical_memory_bytes()
    assert physical is not None and 0 < physical <= mmap.PAGESIZE * os.sysconf("SC_PHYS_PAGES")


def test_a_core_config_field_ctypes_would_cut_short_is_refused():
    assert worker_stack_mib(2**62) == 2**43 + 4  # as a 32-bit field: 4 MiB stacks for 4 EiB of tiles
    with pytest.raises(ConfigError, match=r"^worker_stack_mib=8796093022212: too large for the runtime core's "
                                          r"ts_run_config"):  # fmt: skip
        core_config(RunConfig(), Recording(), kernel_filter=None, worker_stack_mib=2**43 + 4, guard_zones=[])
    assert core_config(RunConfig(), Recording(), kernel_filter=None, worker_stack_mib=36, guard_zones=[]).worker_stack_mib == 36


@pytest.mark.parametrize("maps_only", [False, True], ids=["madvise", "proc_maps"])
def test_memory_mapped_read_only_is_told_apart_without_touching_it(tmp_path, monkeypatch, maps_only):
    if maps_only:
        monkeypatch.setattr(host_memory, "_madvise", lambda: None)  # a kernel without MADV_POPULATE_WRITE
    path = tmp_path / "z.bin"
    np.arange(3 * 4096, dtype=np.float32).tofile(path)
    read_only = np.memmap(path, dtype=np.float32, mode="r", shape=(3, 4096))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's, once per process: the array is not writable
        t = torch.from_numpy(read_only)
    assert unwritable(t) and unwritable(t[2:, 100:]) and unwritable(t[:, 5])
    assert not unwritable(torch.from_numpy(np.memmap(path, dtype=np.float32, mode="r+", shape=(3, 4096))))
    assert not unwritable(torch.from_numpy(np.memmap(path, dtype=np.float32, mode="c", shape=(3, 4096))))
    assert not unwritable(torch.zeros(3, 4096)) and not unwritable(torch.zeros(0))
    assert float(t[2, 4095]) == 3 * 4096 - 1  # read, never written


def test_a_storage_found_writable_is_asked_again_only_when_its_memory_moves(monkeypatch):
    asked = []
    real = host_memory._madvise()
    if real is None:
        pytest.skip("this kernel has no MADV_POPULATE_WRITE")

    def counting(address, length, advice):
        asked.append(address)
        return real(address, length, advice)

    monkeypatch.setattr(host_memory, "_madvise", lambda: counting)
    t = torch.zeros(64, 1024)
    assert not unwritable(t) and asked
    before = len(asked)
    assert not unwritable(t) and not unwritable(t[3:]) and len(asked) == before  # remembered while it lives
    t.resize_(4096, 1024)  # the storage grows: new memory, asked again
    assert not unwritable(t) and len(asked) > before
