"""Studies the benchmarks print in full and the slow tests run small, apart from either so that
neither imports the other: score families, population values and regimes of the interval
coverage, decision, advice, label-free and label-shift studies."""
