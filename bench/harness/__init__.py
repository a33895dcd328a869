"""What the benchmarks drive, shared with the tests that import it from here: the local
stack of calmon processes, Chromium, the simulated web view model, window records of the
documented shape and the Prometheus series contract."""
