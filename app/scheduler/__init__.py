"""The window scheduler: planning (:mod:`.planning`), the leader lock (:mod:`.lock`), its
Prometheus metrics (:mod:`.metrics`) and the loop (:mod:`.runner`). See ``docs/scheduler.md``."""
