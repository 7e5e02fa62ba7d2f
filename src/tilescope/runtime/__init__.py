"""The machine: the C ABI mirror, run records, the core's library, graph runs, the interpreter."""
