"""Who may steer: bearer tokens for mutating calls.

The API binds to loopback by default. Binding anywhere else requires a configured
token (the configuration refuses a non-loopback ``api.host`` without ``api.token``, and
:func:`check_bind` refuses it again here for addresses given directly). Whenever a token
is configured, on any address, mutating calls must carry ``Authorization: Bearer
<token>``; the comparison is constant-time (:func:`hmac.compare_digest`).

>>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
(True, True, True, False)
>>> token_matches("Bearer s3cret", "s3cret"), token_matches("Bearer nope", "s3cret"), token_matches(None, "s3cret")
(True, False, False)
"""

from __future__ import annotations

import hmac
import ipaddress

from moirae.api.errors import ApiError

__all__ = ["ApiError", "check_bind", "is_loopback", "token_matches"]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve beyond localhost without a token."""
    if not is_loopback(host) and not token:
        raise ApiError(f"refusing to serve the API on {host!r} (beyond localhost) without a token: "
                       "set api.token in the configuration")


def token_matches(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries exactly ``Bearer <token>``."""
    if not header:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())
