"""Studies the benchmarks print in full and the slow tests run small: score families,
population values and regimes of the interval coverage, decision, advice and label-free
studies."""
