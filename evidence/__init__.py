"""Baton's signed evidence: DSSE-signed in-toto receipts for check runs, a per-installation RFC 9162
Merkle transparency log they are appended to, an HMAC audit chain, and the offline verifier that lets
anyone check a receipt with only the signer's public key. The offline modules (errors, encoding, keys,
dsse, statement, merkle, checkpoint, links, verify, cli) import only the standard library and `cryptography`,
so a verifier needs nothing else from Baton; only log.py and audit.py talk to Redis.
"""
