"""The ``/_emulator`` admin API: building the world, acting as people, changing what exists, and a
client for tests and the demo (:mod:`emulator.admin.client`)."""
