"""The few HTML pages `baton serve` shows (setup, status): one skeleton, strict headers.

Pages are built from Baton's own strings and values escaped with ``html.escape`` at the point
they are placed (:func:`esc`); nothing is ever rendered from a template language. The only style
is inline and allowed by its hash, there is no script at all, and the policy says so.
"""

from __future__ import annotations

import base64
import hashlib
import html

from starlette.responses import HTMLResponse

STYLE = (
    "body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1f2328}"
    "h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:1.8rem}"
    "table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.25rem .5rem;"
    "border-bottom:1px solid #d0d7de;vertical-align:top}"
    "code,pre{font:13px ui-monospace,monospace;background:#f6f8fa}pre{padding:.75rem;overflow-x:auto}"
    ".refused{color:#cf222e}.note{color:#59636e}label{display:block;margin:.5rem 0}"
    "button{font:inherit;padding:.4rem 1rem}"
)
_STYLE_SOURCE = "'sha256-" + base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode() + "'"


def esc(value: object) -> str:
    """Any value as HTML text (quotes too, so it is safe inside an attribute)."""
    return html.escape(str(value), quote=True)


def policy(form_action: str = "'none'") -> str:
    """No script, no frame, no plugin, no image; styles only by hash; forms only to ``form_action``."""
    return (
        f"default-src 'none'; style-src {_STYLE_SOURCE}; base-uri 'none'; frame-ancestors 'none'; "
        f"form-action {form_action}"
    )


def page(title: str, body: str, *, status: int = 200, form_action: str = "'none'") -> HTMLResponse:
    """A whole page. ``body`` is HTML the caller built with :func:`esc`; ``title`` is escaped here."""
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="referrer" content="no-referrer"><title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head><body>{body}</body></html>"
    )
    return HTMLResponse(
        text,
        status_code=status,
        headers={
            "Content-Security-Policy": policy(form_action),
            "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-store",
        },
    )
