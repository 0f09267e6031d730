"""Baton's deterministic worker: everything that happens after the queue."""
