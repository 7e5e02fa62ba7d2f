"""ts::detail::Message (message.hpp), the fixed buffer every tile-library error message is built in:
integers as std::to_string / Python print them, lists, a missing name, and truncation."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

INCLUDE = Path(__file__).resolve().parents[2] / "src" / "tilescope" / "runtime" / "include"

PROGRAM = r"""
#include <tilescope/message.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
using ts::detail::Message;
int main() {
    {   // one line per case, read by the test
        Message m;
        m << std::numeric_limits<int64_t>::min() << ' ' << std::numeric_limits<int64_t>::max() << ' ' << 0 << ' '
          << -7 << ' ' << static_cast<long long>(-1);
        std::printf("%s\n", m.c_str());
    }
    {
        const __int128 lo = static_cast<__int128>(1) << 127;  // the most negative 128-bit value
        Message m;
        m << lo << ' ' << (lo + 1) * -1;
        std::printf("%s\n", m.c_str());
    }
    {
        const int64_t v[3] = {3, -10, 20};
        Message m;
        m.list(v, 3) << ' ';
        m.list(v, 0) << ' ' << static_cast<const char *>(nullptr);
        std::printf("%s\n", m.c_str());
    }
    {
        Message m;
        for (int i = 0; i < 5000; ++i) m << "ab";
        m << 123;
        const char *t = m.c_str();
        std::printf("%zu %s\n", std::strlen(t), t + std::strlen(t) - 5);
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def lines(tmp_path_factory) -> list[str]:
    work = tmp_path_factory.mktemp("message")
    src, exe = work / "message.cpp", work / "message"
    src.write_text(PROGRAM)
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"]
    cmd = ["g++", *flags, "-I", str(INCLUDE), str(src), "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()


def test_integers_print_as_python_does(lines):
    assert lines[0] == f"{-(2**63)} {2**63 - 1} 0 -7 -1"
    assert lines[1] == f"{-(2**127)} {2**127 - 1}"


def test_lists_and_a_missing_name(lines):
    assert lines[2] == "[3, -10, 20] [] (null)"


def test_a_long_message_is_cut_with_an_ellipsis(lines):
    length, tail = lines[3].split(" ")
    assert int(length) == 4095  # kCapacity - 1: the rest dropped, never written past the buffer
    assert tail == "ab..."
