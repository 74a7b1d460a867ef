"""The wakeup service's two kinds of token, shared by the service and the instance's connector.

An account token (`rwa_…`) is minted by whoever runs the service and registers instances; an
instance token (`rwi_…`) is minted by the instance, kept there as the secret
`REMIT_WAKEUP_TOKEN`, and names the instance when it asks to be woken. Each is 32 random bytes,
URL-safe base64; the service stores only the SHA-256 of the whole token (a 256-bit random
secret cannot be guessed, so one fast hash suffices, as for API tokens).
"""

from __future__ import annotations

import hashlib
import secrets

ACCOUNT_PREFIX = "rwa_"
INSTANCE_PREFIX = "rwi_"
# The secret an instance keeps its token under.
INSTANCE_TOKEN_SECRET = "REMIT_WAKEUP_TOKEN"


def mint_account_token() -> str:
    """A new account token, to be shown once."""
    return ACCOUNT_PREFIX + secrets.token_urlsafe(32)


def mint_instance_token() -> str:
    """A new instance token, to be stored as the instance's secret."""
    return INSTANCE_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the service keeps of a token: its SHA-256, in hex."""
    return hashlib.sha256(token.encode()).hexdigest()
