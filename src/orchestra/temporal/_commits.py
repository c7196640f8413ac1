"""What identifies a workflow run's commit: its digest, its version, and the key a node depends on.

A commit is numbered in its workflow run (``CommitRequest.commit_id``: ``<workflow run id>/<n>``), but
the number alone does not say what it holds: a workflow task that fails after its commit was saved is
replayed with what happened meanwhile, and the same commit comes back holding more, saved again under
the same number. So:

- the **digest** of a commit is what it holds (what a retry compares with what was saved);
- its **version** chains the digests of the workflow run's commits up to it, so it changes when that
  commit or any before it holds something else (commit 2 saved again with more gives commit 3, holding
  the same as before, another version);
- its **key**, ``<commit id>#<version>``, is what the workflow tells a node it depends on
  (``NodeRequest.after_commit``) and what a worker's copy of the run is known to hold: a copy holding the
  first version of a commit saved again does not pass for one holding the second.

Pure functions: the workflow computes them too (deterministic, no I/O).
"""

from __future__ import annotations

import hashlib

from orchestra._json import dumps
from orchestra.temporal._types import CommitRequest

__all__ = ["commit_digest", "commit_key", "commit_version"]


def commit_digest(request: CommitRequest) -> str:
    """What a commit holds, in 16 hex digits: a retry holding the same is the attempt that was saved."""
    content = [
        request.fields,
        request.logs,
        request.unset,
        request.node_id,
        request.blob,
        request.batch,
        request.map_list,
        request.map_items,
        request.log_from,
    ]
    return hashlib.sha256(dumps(content).encode()).hexdigest()[:16]


def commit_version(previous: str, request: CommitRequest) -> str:
    """The version of commit ``request`` after the workflow run's commit of version ``previous`` ("" for
    its first): its digest chained to theirs, in 16 hex digits."""
    return hashlib.sha256(f"{previous}:{commit_digest(request)}".encode()).hexdigest()[:16]


def commit_key(commit_id: str, version: str) -> str:
    """The key of a commit (a node's ``after_commit``): its number and version; "" without a version (a
    commit of a workflow run recorded before versions, which no node depends on by key)."""
    return f"{commit_id}#{version}" if commit_id and version else ""
