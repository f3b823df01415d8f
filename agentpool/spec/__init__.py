"""The Joulie custom resources as plain values, and their parsing; no I/O."""
