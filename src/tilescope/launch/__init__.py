"""Running a build: ``CompiledProgram``, the one run path ``run.launch``, isolation, ``@ts.jit``."""
