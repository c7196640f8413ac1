"""Sessions: persist agents and orchestrators across restarts and machines.

``SnapshotSessionManager`` keeps journaled snapshots on any ``Storage``; the repository-based managers
(``FileSessionManager``, ``S3SessionManager``, ``RepositorySessionManager``) keep the seed's per-message
layout for compatibility.
"""

from orchestra.session._journal import Compaction
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
]
