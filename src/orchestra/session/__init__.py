"""Sessions: persist agents and orchestrators across restarts and machines.

``SnapshotSessionManager`` keeps journaled snapshots on any ``Storage``; the repository-based managers
(``FileSessionManager``, ``S3SessionManager``, ``RepositorySessionManager``) keep the seed's per-message
layout for compatibility. ``orchestra.session.scopes`` is what the layers above (hosting, the CLI,
Temporal) use of a session's scopes: open one, read what a run wrote, discard a run.
"""

from orchestra.session._journal import Compaction
from orchestra.session._uuid7 import uuid7
from orchestra.session.repository import (
    FileSessionManager,
    RepositorySessionManager,
    S3SessionManager,
    Session,
    SessionAgent,
    SessionMessage,
    SessionRepository,
    StorageSessionRepository,
)
from orchestra.session.snapshot import SCHEMA_VERSION, Snapshot, SnapshotManifest
from orchestra.session.snapshot_manager import (
    MultiAgentSaveLatestOn,
    SaveLatestOn,
    SnapshotSessionManager,
    export_scope,
)

__all__ = [
    "SCHEMA_VERSION",
    "Compaction",
    "FileSessionManager",
    "MultiAgentSaveLatestOn",
    "RepositorySessionManager",
    "S3SessionManager",
    "SaveLatestOn",
    "Session",
    "SessionAgent",
    "SessionMessage",
    "SessionRepository",
    "Snapshot",
    "SnapshotManifest",
    "SnapshotSessionManager",
    "StorageSessionRepository",
    "export_scope",
    "uuid7",
]
