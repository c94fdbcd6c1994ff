"""Command line: `oncelog serve | topics | produce | consume`."""
