"""The runtime core's memory kept between runs (csrc/block_cache.hpp, block_arena.hpp,
node_pool.hpp): which kept block a request gets, the bound on what is kept, arenas that
value-initialize recycled blocks, and the tensor map's recycled nodes. Built with AddressSanitizer where g++ has it, so a block used after it was freed, freed
twice or leaked fails the test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "src" / "tilescope" / "runtime" / "csrc"

PROGRAM = r"""
#include "block_arena.hpp"
#include "block_cache.hpp"
#include "node_pool.hpp"
#include <cstdio>
#include <cstring>
#include <map>
using ts::rt::BlockArena;
using ts::rt::BlockCache;
using ts::rt::NodePool;
using ts::rt::PoolAllocator;
struct Item {
    long a = 0;
    long b = 0;
};
int main() {
    {
        BlockCache cache;
        size_t n1 = 1000;
        void *p = cache.take(n1);
        cache.give(p, n1);
        size_t n2 = 1000;
        const bool same = cache.take(n2) == p;                      // kept, handed out again
        std::printf("same %d %zu\n", same, n2);
        cache.give(p, n2);
        size_t n3 = 4000;
        void *big = cache.take(n3);                                 // none fits: new memory
        std::printf("fresh %d %zu\n", big != p, n3);
        size_t n4 = 600;
        const bool half = cache.take(n4) == p;                      // 1000 fits 600 at most twice over
        std::printf("half %d %zu\n", half, n4);
        cache.give(p, n4);                                          // back as the 1000 bytes it is
        std::printf("kept %zu\n", cache.kept_bytes());
        size_t n5 = 400;
        void *small = cache.take(n5);
        std::printf("small %d %zu\n", small != p, n5);             // 1000 is more than twice 400
        cache.give(small, n5);
        cache.give(big, n3);
    }
    {
        BlockCache cache;
        size_t huge = BlockCache::kKeptBytes / 2 + 1, huge2 = huge;
        void *a = cache.take(huge);
        void *b = cache.take(huge2);
        cache.give(a, huge);
        cache.give(b, huge2);                                       // past the bound: freed
        std::printf("bounded %d\n", cache.kept_bytes() == huge);
    }
    {
        BlockArena<Item> plain(4, 16);                              // no cache: its own blocks
        long sum = 0;
        for (int i = 0; i < 100; ++i) sum += plain.allocate(3)->a;
        std::printf("plain %ld\n", sum);
    }
    {
        BlockCache cache;
        {
            BlockArena<Item> arena(4, 16, &cache);
            for (int i = 0; i < 40; ++i) {
                Item *it = arena.allocate(1);
                it->a = it->b = 77;
            }
        }
        long nonzero = 0;
        BlockArena<Item> again(4, 16, &cache);
        for (int i = 0; i < 40; ++i) {
            const Item *it = again.allocate(1);
            nonzero += it->a != 0 || it->b != 0;
        }
        std::printf("zeroed %ld %d\n", nonzero, cache.kept_bytes() < 40 * sizeof(Item));
    }
    {
        NodePool pool;
        using Map = std::multimap<long, Item, std::less<long>, PoolAllocator<std::pair<const long, Item>>>;
        {
            Map m{PoolAllocator<std::pair<const long, Item>>(&pool)};
            for (long i = 0; i < 1000; ++i) m.emplace(i % 7, Item{i, -i});
        }
        const size_t kept = pool.kept_bytes();
        Map again{PoolAllocator<std::pair<const long, Item>>(&pool)};
        for (long i = 0; i < 1000; ++i) again.emplace(i, Item{i, i});
        long sum = 0;
        for (const auto &kv : again) sum += kv.second.a;
        std::printf("nodes %d %d %ld %zu\n", kept > 0, kept % 1000 == 0, sum, pool.kept_bytes());
        void *odd = pool.take(3 * kept);                            // another size: not from the pool
        pool.give(odd, 3 * kept);
        std::printf("other %zu\n", pool.kept_bytes());
    }
    return 0;
}
"""


def _asan_available(tmp: Path) -> bool:
    probe = tmp / "probe.cpp"
    probe.write_text("int main() { return 0; }\n")
    cmd = ["g++", "-fsanitize=address", str(probe), "-o", str(tmp / "probe")]
    return subprocess.run(cmd, capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("block_cache")
    src, exe = work / "block_cache.cpp", work / "block_cache"
    src.write_text(PROGRAM)
    flags = ["-std=c++17", "-O1", "-g", "-Wall", "-Wextra", "-Werror"]
    if _asan_available(work):
        flags.append("-fsanitize=address")
    subprocess.run(
        ["g++", *flags, "-I", str(CSRC), str(src), "-o", str(exe)], check=True, capture_output=True
    )
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    return dict(line.split(" ", 1) for line in lines)


def test_a_kept_block_is_handed_out_again_only_where_it_fits(out):
    assert out["same"] == "1 1000"
    assert out["fresh"] == "1 4000"
    assert out["half"] == "1 1000"  # the block's own size, what give() is told
    assert out["kept"] == "1000"
    assert out["small"] == "1 400"


def test_what_is_kept_is_bounded(out):
    assert out["bounded"] == "1"


def test_an_arena_without_a_cache_value_initializes_its_blocks(out):
    assert out["plain"] == "0"


def test_a_recycled_block_is_value_initialized(out):
    nonzero, all_returned = out["zeroed"].split()
    assert nonzero == "0"
    assert all_returned == "1"  # the second arena took the first one's blocks


def test_map_nodes_are_recycled(out):
    some, whole, total, left = out["nodes"].split()
    assert some == "1"  # a destroyed map's 1000 nodes were kept
    assert whole == "1"  # as whole nodes of one size
    assert int(total) == sum(range(1000))  # a second map on the same nodes holds its own values
    assert left == "0"  # and took every kept node back
    assert out["other"] == "0"  # a request of another size neither came from nor went to the pool
