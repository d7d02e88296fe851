"""Command-line interface: one module per command, kept thin over the library."""
