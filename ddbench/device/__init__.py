"""Checks that need a GPU: the prepared device script (`make device-check`) and its parts."""
