"""A window's computation and what it reads and writes: planning which windows are due
(:mod:`.planning`, fed by the change record :mod:`calmon.db.changes`), the claim that opens a
window's transaction (:mod:`.locks`), its rows (:mod:`.rows`), its reference sets
(:mod:`.references`, cached by :mod:`.reference_cache`), its pooled decision
(:mod:`.decisions`), its computation (:mod:`.compute`) and stored record (:mod:`.record`), and
the paged read of stored results with recompute requests (:mod:`.results`). How and why:
``docs/reference/scheduler.md``.
"""
