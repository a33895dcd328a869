"""The window scheduler: the loop that plans and computes windows (:mod:`.runner`), the fair
order in which due windows are tried and what came of a try (:mod:`.claims`), the leader lock
(:mod:`.lock`) and the scheduler's Prometheus metrics (:mod:`.instruments`). The change scan
and the due windows it plans from are :mod:`calmon.services.windows.planning`; a window's
computation is :mod:`calmon.services.windows.compute`. See ``docs/reference/scheduler.md``."""
