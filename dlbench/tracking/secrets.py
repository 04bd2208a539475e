"""Credentials never reach MLflow: URL passwords and the values of secret environment variables are scrubbed
from every param, tag and text artifact."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

SECRET_MARKERS = ("PASSWORD", "TOKEN", "SECRET", "KEY", "CREDENTIAL")


_URL_CREDENTIALS = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^@\s/]+@")


#: environment values shorter than this are too common to be told apart from ordinary text
MIN_SECRET_CHARS = 6


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose name says they hold a secret (longest first)."""
    env = os.environ if environ is None else environ
    found = {v for k, v in env.items() if any(m in k.upper() for m in SECRET_MARKERS) and len(v) >= MIN_SECRET_CHARS}
    return sorted(found, key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` with URL passwords and the values of secret environment variables replaced by ``***``."""
    text = _URL_CREDENTIALS.sub(r"\g<head>***@", text)
    for value in secret_values():
        text = text.replace(value, "***")
    return text


def redact(mapping: Mapping[str, object]) -> dict[str, object]:
    """Drop values whose key names a secret and scrub the others, so credentials never reach params or tags."""
    return {
        k: ("***" if any(m in k.upper() for m in SECRET_MARKERS) else scrub(v) if isinstance(v, str) else v)
        for k, v in mapping.items()
    }
