"""The evaluation harness: configured runs, results stores and reports."""
