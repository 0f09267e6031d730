"""A UNIX socket a run owns: bound 0600 before anyone can connect, removed only if still its own.

The egress proxy and the model gateway each listen on one, in the run's scratch
directory, and each is bound into the box. Removing the path at the end must not
remove a socket someone else bound there since (a second run reusing a name, a
test), so the file's identity is kept when it is made and checked before unlinking.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path


class OwnedSocket:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._inode: tuple[int, int] | None = None

    def bind(self, backlog: int = 128) -> socket.socket:
        """A listening, non-blocking socket at ``path`` (an existing path raises here, in the caller)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            try:  # nobody can connect before listen(), so tightening the mode here is race-free
                os.chmod(self.path, 0o600)
                st = os.stat(self.path)
                self._inode = (st.st_dev, st.st_ino)
                sock.listen(backlog)
            except BaseException:
                self.path.unlink(missing_ok=True)
                raise
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        return sock

    def unlink(self) -> None:
        """Remove the socket file only if it is still the one bound here; safe to call twice."""
        if self._inode is None:
            return
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            if (st.st_dev, st.st_ino) == self._inode:
                self.path.unlink()
        self._inode = None
