"""C++ toolchain: find g++, compile sources in parallel through a content-addressed cache."""

from tilescope.toolchain.cache import PACKAGE_INCLUDE_DIR, cache_dir, object_path
from tilescope.toolchain.compiler import (
    BASE_FLAGS,
    BuildJob,
    BuildResult,
    CompileError,
    build,
    check,
    compiler_identity,
    find_cxx,
    march_flag,
    reset_stats,
    stats,
)

__all__ = [
    "BASE_FLAGS",
    "PACKAGE_INCLUDE_DIR",
    "BuildJob",
    "BuildResult",
    "CompileError",
    "build",
    "cache_dir",
    "check",
    "compiler_identity",
    "find_cxx",
    "march_flag",
    "object_path",
    "reset_stats",
    "stats",
]
