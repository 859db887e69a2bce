# The agreement report is computed by pure functions in agreement/statistics.py.
