"""`baton audit verify|head|export` and `baton replay`: the operator's checks on what Baton recorded.

Both find Redis as `baton worker` does (``REDIS_URL``, also from ``./.env``, else the embedded
server a running `baton serve` started) and never write to what they check: verifying the audit
chain does not seal pending events, and replay decides again in memory. The audit chain is
MACed, so checking it needs ``BATON_AUDIT_SECRET``; replay compares the signed receipt's
bytes too, with the key from ``BATON_SIGNING_KEY`` (or ``--key`` for a public key).

An intact chain can still have lost its tail. `baton audit head` prints each chain's last entry
(its seq and MAC) to save where Baton cannot write; `baton audit verify --since FILE` then also
checks that every chain still holds its saved head, unchanged, even a chain deleted outright.

Exit codes: 0 all good, 1 something does not match (named on stderr), 2 usage or setup.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import orjson
import redis

from baton import envfile, redis_client, redis_server, settings
from baton.errors import ConfigError
from evidence.audit import AuditChain, derive_key, installations
from evidence.errors import EvidenceError
from evidence.keys import PublicKey, keyring, read_keys
from worker import replay
from worker.context import replication

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE = 0, 1, 2
#: Said once when signed bytes were compared but no key checked the signature over them.
UNCHECKED = (
    "baton replay: no signature was checked (the signed bytes were only compared): pass --key "
    "baton-signing-key.pub.pem (the public key, from /.well-known/baton/keys) or set "
    "BATON_SIGNING_KEY_PATH to check it"
)


def signed_text(r: replay.Replayed) -> str:
    """What a replayed decision's signed bytes showed, never claiming a signature no key checked."""
    if r.signed is None:
        return "not signed"
    if r.signed is False:
        return "SIGNED BYTES DIFFER"
    return "signed bytes identical, signature " + ("verified" if r.signature_checked else "NOT checked")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("audit", help="verify or export the audit chain (needs REDIS_URL)")
    actions = parser.add_subparsers(dest="audit_action", metavar="ACTION", required=True)
    check = actions.add_parser(
        "verify",
        help="walk the chain and name the first broken link",
        description="Check every installation's audit chain (or one) with BATON_AUDIT_SECRET. "
        "Exit 0 intact, 1 broken (the first broken entry is named), 2 usage.",
    )
    check.add_argument("--installation", type=int, metavar="ID", help="only this installation")
    check.add_argument("--since", metavar="FILE", help="also check the heads `baton audit head` saved")
    check.set_defaults(handler=audit_verify_command)
    head = actions.add_parser(
        "head",
        help="print each chain's last entry, to save where Baton cannot write",
        description="Print, as JSON, each installation's last sealed audit entry (seq and MAC). Save it "
        "somewhere Baton cannot write; `baton audit verify --since FILE` then proves no entry up to it "
        "was cut off or rewritten.",
    )
    head.add_argument("--installation", type=int, metavar="ID", help="only this installation")
    head.set_defaults(handler=audit_head_command)
    export = actions.add_parser(
        "export",
        help="write an installation's sealed chain as JSONL",
        description="Write one installation's sealed audit entries as JSON lines, oldest first, to "
        "stdout or a new --out FILE (never overwritten). Needs BATON_AUDIT_SECRET.",
    )
    export.add_argument(
        "--installation",
        type=int,
        metavar="ID",
        required=True,
        help="the installation whose chain to write (`baton audit verify` lists them)",
    )
    export.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    export.set_defaults(handler=audit_export_command)

    again = subparsers.add_parser(
        "replay",
        help="decide a task's trifecta decisions again and compare the bytes",
        description="Re-evaluate the recorded gate decisions of TASK_ID from their recorded inputs "
        "(the policy, kept by digest, and the facts) and compare with the recorded and the signed "
        "bytes. Exit 0 identical, 1 different or not replayable, 2 usage.",
    )
    which = again.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "task_id",
        metavar="TASK_ID",
        nargs="?",
        help="the task (its delivery id, as on the status comment and page)",
    )
    which.add_argument("--all", action="store_true", help="every task with a recorded decision")
    again.add_argument(
        "--key",
        action="append",
        metavar="PUB",
        help="public key file(s) to check the signature over the receipt's bytes (repeatable); "
        "default: the public half of BATON_SIGNING_KEY(_PATH); with neither, the signed bytes are "
        "only compared, and replay says no signature was checked",
    )
    again.add_argument("--json", action="store_true", help="print the results as JSON")
    again.set_defaults(handler=replay_command)


def _settings() -> settings.Settings:
    """The settings as every other command reads them: ``./.env`` under the environment."""
    envfile.load_into(os.environ, Path.cwd() / envfile.ENV_NAME)
    return settings.load()


def _client(config: settings.Settings) -> redis.Redis:
    url = config.redis_url or redis_server.discover()  # as `baton worker` finds it
    return redis_client.connect(url, timeout=10, failover_wait=config.redis_failover_wait)


def _secret(config: settings.Settings) -> bytes:
    secret = config.audit_secret
    if secret is None:
        raise ConfigError("no-audit-secret", "set BATON_AUDIT_SECRET: the chain's MACs are keyed with it")
    return secret


def audit_verify_command(args: argparse.Namespace) -> int:
    saved = _saved_heads(Path(args.since)) if args.since else {}
    config = _settings()
    client, secret = _client(config), _secret(config)
    chosen = [args.installation] if args.installation is not None else installations(client)
    if args.installation is None:  # a chain deleted outright is no longer listed: its saved head is
        chosen = sorted({*chosen, *saved})
    broken = 0
    for installation in chosen:
        chain = AuditChain(client, installation, derive_key(secret, installation))
        survey = chain.survey()
        anchored = saved.get(installation)
        problem = survey.broken.reason if survey.broken else anchored and chain.check_anchor(*anchored)
        if problem:
            broken += 1
            print(f"installation {installation}: BROKEN: {problem}", file=sys.stderr)
            continue
        held = f", holding the saved head (entry {anchored[0]})" if anchored else ""
        print(
            f"installation {installation}: {survey.entries} entries intact{held}, {chain.pending()} pending"
        )
        for gap in survey.gaps:  # honest losses, named in the chain itself: not a break
            print(f"installation {installation}: gap: {gap.describe()}")
    if not chosen:
        print("no audit chain in this Redis yet")
    return EXIT_MISMATCH if broken else EXIT_OK


def audit_head_command(args: argparse.Namespace) -> int:
    config = _settings()
    client, secret = _client(config), _secret(config)
    # A head saved to anchor the chain must be one a failover cannot take back.
    replication(config).confirm(client, "the audit chains' heads")
    chosen = [args.installation] if args.installation is not None else installations(client)
    heads = []
    for installation in chosen:
        head = AuditChain(client, installation, derive_key(secret, installation)).head()
        if head is not None:
            heads.append({"installation": installation, "seq": head[0], "mac": head[1].hex()})
    print(orjson.dumps({"heads": heads}, option=orjson.OPT_INDENT_2).decode())
    return EXIT_OK


def _saved_heads(path: Path) -> dict[int, tuple[int, bytes]]:
    """installation -> (seq, mac) from a file `baton audit head` wrote; a usage error names what is wrong."""
    try:
        data = orjson.loads(path.read_bytes())
        return {int(h["installation"]): (int(h["seq"]), bytes.fromhex(h["mac"])) for h in data["heads"]}
    except OSError as exc:
        raise ConfigError(
            "bad-audit-head", f"cannot read {path}: {exc.strerror}; pass the file `baton audit head` wrote"
        ) from exc
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            "bad-audit-head",
            f"{path} is not what `baton audit head` prints: expected "
            '{"heads": [{"installation": ID, "seq": N, "mac": HEX}, ...]}',
        ) from exc


def audit_export_command(args: argparse.Namespace) -> int:
    config = _settings()
    client, secret = _client(config), _secret(config)
    chain = AuditChain(client, args.installation, derive_key(secret, args.installation))
    if args.out:
        with Path(args.out).open("x", encoding="utf-8") as out:
            count = chain.export(out)
        print(f"{count} entries written to {args.out}", file=sys.stderr)
    else:
        chain.export(sys.stdout)
    return EXIT_OK


def _replay_keys(paths: list[str] | None, config: settings.Settings) -> dict[str, PublicKey] | None:
    if paths:
        found: dict[str, PublicKey] = {}
        for path in paths:
            found.update(read_keys(Path(path).read_text(), path))
        return found
    key = config.signing_key
    return keyring([key.public]) if key is not None else None


def replay_command(args: argparse.Namespace) -> int:
    config = _settings()
    client = _client(config)
    tasks = replay.recorded_tasks(client) if args.all else [args.task_id]
    try:
        keys = _replay_keys(args.key, config)
        results = {task: replay.replay(client, task, keys) for task in tasks}
    except (EvidenceError, OSError) as exc:
        print(f"baton replay: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, OSError) else EXIT_MISMATCH
    if not any(results.values()):
        print(f"baton replay: no recorded decision for {'any task' if args.all else args.task_id}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    ok = all(r.match and r.signed is not False for found in results.values() for r in found)
    if args.json:
        data = {task: [r.to_data() for r in found] for task, found in results.items()}
        print(orjson.dumps({"identical": ok, "tasks": data}).decode())
        return EXIT_OK if ok else EXIT_MISMATCH
    for task, found in results.items():
        for r in found:
            verdict = "identical" if r.match else f"DIFFERENT ({r.problem or 'the decision changed'})"
            print(f"{task} {r.where}: {verdict}; {signed_text(r)}; recorded sha256:{r.recorded_sha256[:16]}…")
    if any(r.signed is not None and not r.signature_checked for found in results.values() for r in found):
        print(UNCHECKED, file=sys.stderr)
    return EXIT_OK if ok else EXIT_MISMATCH
