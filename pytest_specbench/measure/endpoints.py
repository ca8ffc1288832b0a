"""Servers someone else runs, named by ``--specbench-<engine>-endpoints``: the two a case uses, and what its
fingerprint holds of them. Every served engine's endpoints are given alike (settings/server_options.py)."""

from __future__ import annotations

from typing import Any

from ..cases.matrix import Case
from ..models.base import NotApplicable


def case_endpoints(endpoints: tuple[tuple[str, str], ...], case: Case, option: str) -> tuple[str, str]:
    """The baseline's and the case's k's URLs; the case is skipped, naming ``option``, where no URL is given for
    its k."""
    urls = dict(endpoints)
    if f"k{case.k}" not in urls:
        raise NotApplicable(f"--specbench-{option} names no endpoint for k={case.k} (it names {', '.join(urls)})")
    return urls["baseline"], urls[f"k{case.k}"]


def endpoints_fingerprint(endpoints: tuple[tuple[str, str], ...], case: Case) -> dict[str, Any]:
    """The case's part of the endpoints, by URL: what a resumed run compares."""
    urls = dict(endpoints)
    return {"endpoints": {name: urls.get(name) for name in ("baseline", f"k{case.k}")}}
