"""The rl_* tools an agent (Hermes Agent, any MCP client) drives training with, served by `hermes-stack mcp`.

environments.py lists what can be trained on, config_edit.py reads and safely edits the two config files, runs.py
keeps the runs on disk, tools.py implements the ten tools over the controller's own functions, server.py serves
them over MCP (stdio, or Streamable HTTP).
"""
