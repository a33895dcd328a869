"""Offline evaluation of a CSV file (`calmon evaluate`): reading, grouping, rendering."""
