"""``baton demo``: the whole product, played end to end against the GitHub emulator and the model
stand-in. It is the product's, not the emulator's: it drives ``bot``, ``worker`` and ``emulator``
as separate processes and checks what a user would see."""
