"""What this machine's /proc/cpuinfo says about its processor (Linux; "" elsewhere)."""

from __future__ import annotations

import functools
from pathlib import Path


def cpuinfo_field(key: str) -> str:
    """The first value of `key` (e.g. `vendor_id`, `model name`) in /proc/cpuinfo; ""
    where the file or the key is missing."""
    return field_in_cpuinfo(_cpuinfo(), key)


def field_in_cpuinfo(text: str, key: str) -> str:
    """The first value of `key` in a /proc/cpuinfo text; "" if it has none."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return ""


@functools.cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
