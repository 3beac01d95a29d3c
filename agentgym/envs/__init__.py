"""agentgym's environment families. Each subpackage's ``register()`` is an entry point of the
``agentgym.envs`` group and imports nothing heavy."""
