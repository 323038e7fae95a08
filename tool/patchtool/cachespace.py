"""What one patch repository keeps in the shared cache, namespaced by that repository.

Every clone of the patch repository on a machine shares one cache (``upstream.git``), so each
ref and file a command leaves there for later (a rebase's replayed commits, a checkout branch)
is named under the project's key. Two clones then never see each other's state.

The key is derived from the repository's resolved path: the same directory always gets the
same key (whatever symbolic links lead to it), a copy or a move is another project and starts
with no state of its own. A key stored in the repository would follow a copy, and two copies
would share their state again.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

REFS = "refs/patchtool"


def project_key(root: Path) -> str:
    """The project's name in the cache: 16 hex digits of the sha256 of its resolved path."""
    return hashlib.sha256(str(root.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def replay_ref(root: Path) -> str:
    """Where a rebase of this project keeps the commits it replayed."""
    return f"{REFS}/{project_key(root)}/replay"
