"""Reports of a run: the JSON results file, JUnit XML, saved outputs and terminal tables."""
