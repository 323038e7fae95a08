"""The editing loop, one module per command: ``checkout`` (and ``checkout --refresh``:
``checkout_refresh``), ``new``, ``refresh ID`` (``refresh``), ``export`` (``--quilt``: ``quilt``,
``--pr``: ``pullrequest``), ``drop`` and ``import`` (``import_``); a patch that does not apply,
left in the worktree as far as it goes (``repair``). What they share: the checkout branch in the
cache, its trailers, its record and its moves (``branch``).

The wing sits above ``series`` (applying, ids, writes, a patch's metadata and its DEP-3 form)
and below ``rebase``: a refresh merges with ``git.treemerge``, never through the rebase command."""
