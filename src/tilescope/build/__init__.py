"""Compiling to a build directory and reading one back: manifest, state, refresh, report, paths."""
