"""The web view: HTML pages over the stored window records, rendered on the server.

``/ui`` lists the models with their latest window and alert-worthy state; ``/ui/models/{model}``
charts a model's windows as inline SVG built in Python (:mod:`calmon.ui.charts`), with a verdict
in plain words per window (:mod:`calmon.ui.verdict`, in the words of :mod:`calmon.verdict`). No
script runs and nothing is loaded from another host; see ``docs/reference/ui.md``.
"""
