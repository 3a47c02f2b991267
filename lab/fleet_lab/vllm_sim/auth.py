"""vLLM's `--api-key` (its `AuthenticationMiddleware`): every path under `/v1` wants
`Authorization: Bearer KEY`, else 401 `{"error": "Unauthorized"}`; `/health`, `/metrics`,
`/version` and the rest stay open."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

UNAUTHORIZED: dict[str, Any] = {"error": "Unauthorized"}


def refuses(api_key: str | None, path: str, headers: Mapping[str, str]) -> bool:
    """True when vLLM started with `api_key` answers this request 401 (`headers` lower-cased)."""
    if api_key is None or not path.startswith("/v1"):
        return False
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), api_key.encode())
