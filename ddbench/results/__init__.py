"""The typed results of a run: what each case produced, the run document, its file, reading, merging."""
