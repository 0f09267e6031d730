"""Baton's web side: receive a webhook, verify it, route it, enqueue it, answer."""
