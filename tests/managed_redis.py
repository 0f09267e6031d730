"""A real redis-server that refuses what managed Redis services refuse, for the tests.

A provider hands out an account, not the server: its own console sets persistence and eviction,
and the account may not run the commands that would change them or reach outside the database.
Here an ACL user (``baton``) stands in for that account on a server the test owns; the default
user (the provider's side) keeps every command, so a test can look at what the server refused
(`ACL LOG`) and set it up.

What the rules refuse, and on which service's word (each provider's documentation, read 2026):

- Amazon ElastiCache ("Restricted commands"): BGREWRITEAOF, BGSAVE, CONFIG, DEBUG, MIGRATE,
  REPLICAOF, SAVE, SLAVEOF, SHUTDOWN, SYNC.
- Azure Cache for Redis ("Redis commands not supported in Azure Cache for Redis"): ACL,
  BGREWRITEAOF, BGSAVE, CLUSTER (writes), CONFIG, DEBUG, MIGRATE, PSYNC, REPLICAOF, REPLCONF,
  SAVE, SHUTDOWN, SLAVEOF, SYNC; with active geo-replication also FLUSHALL and FLUSHDB.
- Redis Cloud ("Compatibility with Redis commands"): CONFIG GET/SET only for a subset of settings,
  CONFIG RESETSTAT, DEBUG, SHUTDOWN, SWAPDB, most of LATENCY and MEMORY, the persistence commands
  (BGREWRITEAOF, BGSAVE, LASTSAVE, SAVE), the replication commands (FAILOVER, MIGRATE, PSYNC,
  REPLCONF, REPLICAOF, ROLE, SLAVEOF, SYNC), CLIENT PAUSE/UNPAUSE/NO-EVICT/REPLY/TRACKING/CACHING/
  GETREDIR, SELECT, RESET, ACL SETUSER/DELUSER/LOAD/SAVE/LOG/GENPASS, MODULE LOAD/UNLOAD, SCRIPT DEBUG.
- Upstash (its command reference): CONFIG GET answers only ``notify-keyspace-events`` (any other
  name comes back empty, not refused), CONFIG SET changes only that, INFO has no persistence
  section, SELECT takes only 0; CLIENT arrived late (its 6.2-era compatibility table had none).
- Google Memorystore: the CLIENT commands only from Redis 6 on.

The user below refuses the union of those (CLIENT whole, as the strictest of them did), and also
SCRIPT FLUSH and MONITOR, which none of them lists: Baton must not need them either. INFO and
WAIT stay allowed, as every one of them allows them; a test that wants INFO refused says so.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.redis_topology import Node, Security

USER = "baton"
REFUSED = (
    "-config", "-client", "-acl", "-debug", "-shutdown", "-save", "-bgsave", "-bgrewriteaof",
    "-lastsave", "-replicaof", "-slaveof", "-failover", "-sync", "-psync", "-replconf", "-migrate",
    "-role", "-module", "-swapdb", "-latency", "-cluster", "-select", "-reset", "-flushall",
    "-flushdb", "-script|flush", "-script|debug", "-memory|stats", "-memory|doctor", "-monitor",
)  # fmt: skip


@dataclass
class ManagedRedis:
    node: Node
    password: str
    url: str  # as the provider's console shows it: the restricted user's
    refuses_info: bool = False

    def admin(self) -> redis.Redis:
        """The provider's side: every command (set-up, `ACL LOG`)."""
        return self.node.client()

    def refused(self) -> set[str]:
        """What the server refused the restricted user since the last ``reset_log``
        (``client|setname``, ``config|get``...)."""
        client = self.admin()
        try:
            entries = client.acl_log(count=1000)
        finally:
            client.close()
        mine = [e for e in entries if e.get("username") == USER and e.get("reason") == "command"]
        return {str(e["object"]) for e in mine}

    def reset(self) -> None:
        """Empty the database and the ACL log, as before a test."""
        client = self.admin()
        try:
            client.flushall()
            client.acl_log_reset()
        finally:
            client.close()


@contextmanager
def managed_redis(directory: Path, *, refuse_info: bool = False) -> Iterator[ManagedRedis]:
    """A durable server (AOF on, noeviction: what Baton needs) whose ``baton`` user is refused what
    managed services refuse; with ``refuse_info``, INFO as well."""
    admin_password = secrets.token_hex(16)
    password = secrets.token_hex(16)
    rules = " ".join([*REFUSED, *(["-info"] if refuse_info else [])])
    account = f"user {USER} on >{password} ~* &* +@all {rules}"
    node = Node(directory, security=Security(password=admin_password), lines=[account])
    node.start()
    try:
        yield ManagedRedis(node, password, f"redis://{USER}:{password}@127.0.0.1:{node.port}/0", refuse_info)
    finally:
        node.kill()
