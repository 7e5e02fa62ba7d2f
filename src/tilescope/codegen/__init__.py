"""C++ for kernels and the orchestration, ``kernel_config.py``, and a build's re-run files."""
