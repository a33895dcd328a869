"""``calmon simulate``: a synthetic stream whose truth is known, sent to a running server.

- :mod:`calmon.simulation.stream`: the phases, the window plan and the generated predictions.
- :mod:`calmon.simulation.population`: the population value of each metric, by integration.
- :mod:`calmon.simulation.sender`: the batched upload, through :class:`calmon_client.Api`.
- :mod:`calmon.simulation.report`: waiting for the server's window results, and the summary.
"""
