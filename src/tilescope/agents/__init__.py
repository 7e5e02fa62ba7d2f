"""tilescope for coding agents: ``tilescope mcp``, a Model Context Protocol server whose tools
triage, localize, replay and fix a build and query what its runs wrote (docs/agents.md).

``agents.tools`` holds the tools as plain functions of JSON arguments (no SDK needed);
``agents.server`` serves them over stdio with the ``mcp`` SDK (``pip install 'tilescope[agents]'``).
"""
