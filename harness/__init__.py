"""What the benchmarks and the tests both drive, apart from either so that neither imports the
other: the local stack of calmon processes and the polling around it, Chromium, the simulated
web view model, window records of the documented shape and the Prometheus series contract."""
