"""Baton's hands on GitHub: App auth, bounded retries, and the few calls the worker makes.

Only the worker talks to GitHub, and only through this package; agents never do.
"""
